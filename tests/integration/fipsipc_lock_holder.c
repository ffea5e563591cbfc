/* Attaches to a FIPS-IPC segment (the FIPS paper's prototype, src/lib/fips_buf.c)
 * as a reader, takes the header's assignment_lock as fips_buf_attach does, prints
 * "locked" and waits: a test kills it there, as a process killed inside an attach
 * would die (tests/integration/test_fipsipc.py). */
#include <fips_buf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
    fips_buf_arg_t arg = {0};
    arg.role = FIPS_READER;
    const char *conf = getenv("FIPS_BUF_CONF");
    int r = fips_buf_init(&arg, conf ? conf : "/etc/fips_buf.conf");
    if (r != 0) {
        printf("init %d\n", r);
        return 1;
    }
    pthread_mutex_lock(&arg.header->assignment_lock);
    printf("locked\n");
    fflush(stdout);
    for (;;)
        pause();
}
