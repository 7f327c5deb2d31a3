/* A tiny assertion helper for the C ABI tests (C99, no test framework): each CHECK_STATUS
 * asserts a call's status and that moejit_last_error() names the argument, and keeps going, so
 * one run lists every failure. main() returns c_check_result(): 0, or 1 if any check failed. */
#ifndef MOEJIT_TEST_C_CHECK_H
#define MOEJIT_TEST_C_CHECK_H

#include <stdio.h>
#include <string.h>

static int c_check_failures = 0;
static int c_check_count = 0;

static void c_check_fail(const char *file, int line, const char *what, const char *detail) {
    ++c_check_failures;
    fprintf(stderr, "%s:%d: FAILED: %s%s%s\n", file, line, what, detail ? "\n    " : "", detail ? detail : "");
}

#define CHECK(cond)                                                           \
    do {                                                                      \
        ++c_check_count;                                                      \
        if (!(cond)) c_check_fail(__FILE__, __LINE__, #cond, NULL);           \
    } while (0)

/* The call returns `expected`; on failure, moejit_last_error() contains `needle` (NULL: any
 * non-empty message). moejit_last_error is read through `last_error_fn` so that callers built
 * against an old header can pass theirs. */
#define CHECK_STATUS_FN(call, expected, needle, last_error_fn, status_string_fn)                       \
    do {                                                                                            \
        int c_check_got_ = (int)(call);                                                             \
        const char *c_check_msg_ = last_error_fn();                                                 \
        char c_check_buf_[1024];                                                                    \
        ++c_check_count;                                                                            \
        if (c_check_got_ != (int)(expected)) {                                                      \
            snprintf(c_check_buf_, sizeof c_check_buf_, "status %s, expected %s; message: \"%s\"",  \
                     status_string_fn(c_check_got_), status_string_fn(expected), c_check_msg_);     \
            c_check_fail(__FILE__, __LINE__, #call, c_check_buf_);                                  \
        } else if ((int)(expected) != 0 &&                                                          \
                   ((needle) ? strstr(c_check_msg_, (needle) ? (needle) : "") == NULL               \
                             : c_check_msg_[0] == '\0')) {                                          \
            snprintf(c_check_buf_, sizeof c_check_buf_, "message \"%s\" does not name \"%s\"",      \
                     c_check_msg_, (needle) ? (needle) : "(anything)");                             \
            c_check_fail(__FILE__, __LINE__, #call, c_check_buf_);                                  \
        }                                                                                           \
    } while (0)

#define CHECK_STATUS(call, expected, needle) \
    CHECK_STATUS_FN(call, expected, needle, moejit_last_error, moejit_status_string)

/* One bad field at a time against an otherwise valid argument struct: sets (args).field to
 * `bad`, checks `call` (which reads args) like CHECK_STATUS, then restores args as it was. */
#define CHECK_FIELD(args, field, bad, call, expected, needle)   \
    do {                                                        \
        unsigned char c_check_keep_[sizeof(args)];              \
        memcpy(c_check_keep_, &(args), sizeof(args));           \
        (args).field = bad;                                     \
        CHECK_STATUS(call, expected, needle);                   \
        memcpy(&(args), c_check_keep_, sizeof(args));           \
    } while (0)

/* The message does not contain `needle` (e.g. the last call's message must not blame struct_size). */
#define CHECK_MESSAGE_LACKS(needle)                                                       \
    do {                                                                                  \
        ++c_check_count;                                                                  \
        if (strstr(moejit_last_error(), (needle)) != NULL)                                \
            c_check_fail(__FILE__, __LINE__, "message lacks \"" needle "\"", moejit_last_error()); \
    } while (0)

static int c_check_result(const char *name) {
    if (c_check_failures)
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, c_check_failures, c_check_count);
    else
        printf("%s: all %d checks passed\n", name, c_check_count);
    return c_check_failures ? 1 : 0;
}

#endif
