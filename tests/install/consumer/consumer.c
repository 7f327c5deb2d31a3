/* An installed-moejit consumer in C: the header by its documented name, the version it was
 * compiled against equals the library's, and a context either opens or says why not. */
#include <moejit.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    moejit_context_t ctx = NULL;
    moejit_status_t status;
    if (strcmp(moejit_version(), MOEJIT_VERSION_STRING) != 0) {
        fprintf(stderr, "header says %s, library says %s\n", MOEJIT_VERSION_STRING, moejit_version());
        return 1;
    }
    status = moejit_context_create(NULL, &ctx);
    if (status == MOEJIT_SUCCESS) {
        moejit_context_destroy(ctx);
        printf("C consumer: moejit %s, context created\n", moejit_version());
        return 0;
    }
    if (status == MOEJIT_ERROR_NO_DRIVER || status == MOEJIT_ERROR_NO_DEVICE) {
        printf("C consumer: moejit %s, no GPU here (%s)\n", moejit_version(), moejit_status_string(status));
        return 0;
    }
    fprintf(stderr, "moejit_context_create: %s: %s\n", moejit_status_string(status), moejit_last_error());
    return 1;
}
