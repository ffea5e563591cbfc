/* A sequence-numbered producer and consumer on the FIPS-IPC prototype's own ring library (fips_buf.c).
 *
 * The prototype's test programs write "hello world %d" and count batches, so they cannot show what a lap
 * loses; these two use the very same library and tell:
 *   fipsipc_seq producer   stdin "w K": write K records "seq N" (one slot each), print "wrote TOTAL"
 *   fipsipc_seq consumer   stdin "r":   read until the ring is empty, print "read TOTAL skipped SKIPPED"
 *                          (SKIPPED: the sum of every gap in the sequence numbers it read)
 * Both print "ready" once attached; both read $FIPS_BUF_CONF.  Built by tests/integration/test_fipsipc.py
 * with the prototype's source (fipstop.bench.fipsipc_proto); this file is fipstop's, the library is not.
 */
#include <fips_buf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "producer") && strcmp(argv[1], "consumer"))) {
    fprintf(stderr, "usage: fipsipc_seq producer|consumer\n");
    return 2;
  }
  int producer = !strcmp(argv[1], "producer");
  fips_buf_arg_t arg = {0};
  arg.role = producer ? FIPS_WRITER : FIPS_READER;
  const char *conf = getenv("FIPS_BUF_CONF");
  if (!conf || fips_buf_init(&arg, conf) != FIPS_BUF_SUCCESS) {
    fprintf(stderr, "init failed\n");
    return 1;
  }
  fips_buf_thread_arg_t t = {0};
  t.process_arg = &arg;
  if (fips_buf_attach(&t) != FIPS_BUF_SUCCESS) {
    fprintf(stderr, "attach failed\n");
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready\n");
  uint64_t total = 0, skipped = 0, expect = 0;
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    if (producer && line[0] == 'w') {
      long k = strtol(line + 1, NULL, 10);
      for (long i = 0; i < k; i++) {
        struct iovec iov[1];
        while (fips_get_write_buffer(&t, iov, 1) != FIPS_BUF_SUCCESS) {
        }
        iov[0].iov_len = (size_t)snprintf(iov[0].iov_base, iov[0].iov_len, "seq %" PRIu64, total) + 1;
        fips_buf_write(&t, iov, 1);
        total++;
      }
      printf("wrote %" PRIu64 "\n", total);
    } else if (!producer && line[0] == 'r') {
      struct iovec iov[1];
      uint64_t tag;
      while (fips_buf_read(&t, iov, 1, &tag, 0) == FIPS_BUF_SUCCESS) {
        uint64_t seq = 0;
        if (sscanf(iov[0].iov_base, "seq %" SCNu64, &seq) == 1) {
          if (seq > expect) skipped += seq - expect;
          expect = seq + 1;
        }
        fips_buf_return(&t, tag);
        total++;
      }
      printf("read %" PRIu64 " skipped %" PRIu64 "\n", total, skipped);
    } else if (line[0] == 'q') {
      break;
    }
  }
  fips_buf_detach(&t);
  fips_buf_destroy(&arg, 0);
  return 0;
}
