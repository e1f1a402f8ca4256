// How fast can N bytes of one file be copied into a new one, by each way
// ckptfix could copy an unchanged storage, with the input and output
// offsets at chosen places in a page? The measurements behind
// FileSink::copy_from (docs/performance.md, "Copies at a different page
// phase"). Time it as a whole process next to `cp` of the same file, the
// page cache warm, the output removed before each run:
//
//   cc -O2 -pthread bench/copy_phase.c -o /tmp/copy_phase
//   /tmp/copy_phase MODE IN OUT IN_OFFSET OUT_OFFSET BYTES [THREADS|BUFFER_MIB]
//
// MODE: kernel (copy_file_range; THREADS threads, each its own range),
// pread (pread + write through a BUFFER_MIB buffer), mmap (windows of
// BUFFER_MIB mapped from the input, written out; MAP_POPULATE when the
// environment has POPULATE=1). OUT gets OUT_OFFSET zero bytes first.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void die(const char* what) {
  perror(what);
  exit(1);
}

static void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = write(fd, p, n);
    if (k <= 0) die("write");
    p += k;
    n -= (size_t)k;
  }
}

struct range {
  int in, out;
  loff_t from, to;
  size_t n;
};

static void* kernel_copy(void* arg) {
  struct range* r = arg;
  while (r->n > 0) {
    const ssize_t k = copy_file_range(r->in, &r->from, r->out, &r->to, r->n, 0);
    if (k <= 0) die("copy_file_range");
    r->n -= (size_t)k;
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: %s kernel|pread|mmap IN OUT IN_OFFSET OUT_OFFSET BYTES [THREADS|BUFFER_MIB]\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  const int in = open(argv[2], O_RDONLY);
  const int out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0 || out < 0) die("open");
  const off_t from = atoll(argv[4]), to = atoll(argv[5]);
  const size_t n = (size_t)atoll(argv[6]);
  const long extra = argc > 7 ? atol(argv[7]) : 1;
  char* zeros = calloc(1, (size_t)to + 1);
  write_all(out, zeros, (size_t)to);

  if (strcmp(mode, "kernel") == 0) {
    const int threads = extra < 1 ? 1 : extra > 64 ? 64 : (int)extra;
    pthread_t tid[64];
    struct range r[64];
    const size_t share = (n / (size_t)threads + 4095) & ~(size_t)4095;
    for (int i = 0; i < threads; ++i) {
      const size_t start = (size_t)i * share;
      const size_t len = start >= n ? 0 : (n - start < share ? n - start : share);
      r[i] = (struct range){in, out, from + (loff_t)start, to + (loff_t)start, len};
      if (pthread_create(&tid[i], NULL, kernel_copy, &r[i]) != 0) die("pthread_create");
    }
    for (int i = 0; i < threads; ++i) pthread_join(tid[i], NULL);
    return 0;
  }
  const size_t window = (size_t)extra << 20;
  char* buffer = aligned_alloc(4096, window);
  for (size_t done = 0; done < n;) {
    const size_t len = n - done < window ? n - done : window;
    const off_t at = from + (off_t)done;
    if (strcmp(mode, "pread") == 0) {
      if (pread(in, buffer, len, at) != (ssize_t)len) die("pread");
      write_all(out, buffer, len);
    } else if (strcmp(mode, "mmap") == 0) {
      const off_t base = at & ~(off_t)4095;
      const size_t skip = (size_t)(at - base);
      const int flags = MAP_SHARED | (getenv("POPULATE") ? MAP_POPULATE : 0);
      char* p = mmap(NULL, len + skip, PROT_READ, flags, in, base);
      if (p == MAP_FAILED) die("mmap");
      write_all(out, p + skip, len);
      munmap(p, len + skip);
    } else {
      fprintf(stderr, "unknown mode '%s'\n", mode);
      return 2;
    }
    done += len;
  }
  return 0;
}
