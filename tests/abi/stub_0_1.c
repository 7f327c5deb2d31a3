/* An unversioned stand-in for libmoejit.so.0, as every release up to 0.3.0 was: exactly the
 * entry points old_caller_0_1.c uses, so the caller links to them without symbol versions, the
 * way a binary built against 0.1-0.3 did. Never run: the test runs the caller with the real
 * library first on LD_LIBRARY_PATH. */
#include "moejit.h" /* the 0.1.0 header */

#include <stdlib.h>

static void never(void) { abort(); }
const char *moejit_status_string(moejit_status_t s) { (void)s; never(); return NULL; }
const char *moejit_last_error(void) { never(); return NULL; }
const char *moejit_version(void) { never(); return NULL; }
int moejit_version_number(void) { never(); return 0; }
moejit_status_t moejit_context_options_init(moejit_context_options_t *o) { (void)o; never(); return 0; }
moejit_status_t moejit_context_create(const moejit_context_options_t *o, moejit_context_t *c) { (void)o; (void)c; never(); return 0; }
void moejit_context_destroy(moejit_context_t c) { (void)c; never(); }
moejit_status_t moejit_plan_desc_init(moejit_plan_desc_t *d) { (void)d; never(); return 0; }
moejit_status_t moejit_plan_warmup(moejit_context_t c, const moejit_plan_desc_t *d, int *k) { (void)c; (void)d; (void)k; never(); return 0; }
moejit_status_t moejit_forward_args_init(moejit_forward_args_t *a) { (void)a; never(); return 0; }
moejit_status_t moejit_backward_args_init(moejit_backward_args_t *a) { (void)a; never(); return 0; }
moejit_status_t moejit_plan_forward(moejit_plan_t p, const moejit_forward_args_t *a) { (void)p; (void)a; never(); return 0; }
moejit_status_t moejit_plan_backward(moejit_plan_t p, const moejit_backward_args_t *a) { (void)p; (void)a; never(); return 0; }
moejit_status_t moejit_plan_create(moejit_context_t c, const moejit_plan_desc_t *d, moejit_plan_t *p) { (void)c; (void)d; (void)p; never(); return 0; }
void moejit_plan_destroy(moejit_plan_t p) { (void)p; never(); }
moejit_status_t moejit_plan_saved_size(moejit_plan_t p, int64_t t, size_t *b) { (void)p; (void)t; (void)b; never(); return 0; }
moejit_status_t moejit_plan_workspace_size(moejit_plan_t p, int64_t t, size_t *b) { (void)p; (void)t; (void)b; never(); return 0; }
