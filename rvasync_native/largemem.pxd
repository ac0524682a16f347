# cython: language_level=3
"""Large buffers: copying into fresh memory, and faulting fresh memory in ahead of use.

A payload of many MiB lands in memory the process has just allocated, and most
of the time that takes is the operating system providing fresh pages (on a
virtual machine about 0.7 ms per MiB, far more than the copy itself). Two
threads fault pages in at nearly twice the rate of one, so:

* ``large_copy`` splits a big memcpy in halves and runs the second on a
  short-lived thread while the caller (GIL released) copies the first;
* ``Prefault`` asks the kernel, from a background thread, to back a range of a
  buffer with pages (``MADV_POPULATE_WRITE``, which never changes the contents)
  while the caller fills the buffer front to back.

Both fall back to doing nothing special when threads cannot be created or the
kernel lacks the request. Inline functions only: cimported by the modules that
need them.
"""

from libc.string cimport memcpy

cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    int pthread_create(pthread_t* thread, const void* attr, void* (*start)(void*) noexcept nogil, void* arg)
    int pthread_join(pthread_t thread, void** retval)

cdef extern from *:
    """
    #include <unistd.h>
    /* Online CPUs and page size, asked once per module (sysconf reads files). */
    static long rvasync_online_cpus(void) {
        static long n = 0;
        if (n == 0) n = sysconf(_SC_NPROCESSORS_ONLN);
        return n;
    }
    static size_t rvasync_page_size(void) {
        static long n = 0;
        if (n <= 0) n = sysconf(_SC_PAGESIZE);
        return n > 0 ? (size_t)n : 4096;
    }
    """
    long rvasync_online_cpus() nogil
    size_t rvasync_page_size() nogil

cdef extern from "<sys/mman.h>" nogil:
    int madvise(void* addr, size_t length, int advice)

#: Copies at least this long are split across two threads (when there are two CPUs).
cdef enum:
    SPLIT_COPY_MIN = 4 * 1024 * 1024
    # Linux 5.14+; older kernels answer EINVAL and nothing happens.
    MADV_POPULATE_WRITE_ = 23


cdef struct _CopyJob:
    char* dst
    const char* src
    size_t n


cdef inline void* _run_copy(void* arg) noexcept nogil:
    cdef _CopyJob* job = <_CopyJob*>arg
    memcpy(job.dst, job.src, job.n)
    return NULL


cdef inline void large_copy(char* dst, const char* src, size_t n) noexcept nogil:
    """memcpy, on two threads when ``n`` is at least SPLIT_COPY_MIN and there are two CPUs."""
    cdef _CopyJob job
    cdef pthread_t thread
    cdef size_t half
    if n < SPLIT_COPY_MIN or rvasync_online_cpus() < 2:
        memcpy(dst, src, n)
        return
    half = (n // 2) & ~(<size_t>4095)
    job.dst = dst + half
    job.src = src + half
    job.n = n - half
    if pthread_create(&thread, NULL, _run_copy, &job) != 0:
        memcpy(dst, src, n)
        return
    memcpy(dst, src, half)
    pthread_join(thread, NULL)


cdef struct Prefault:
    char* start
    size_t length
    pthread_t thread
    bint running


cdef inline void* _run_prefault(void* arg) noexcept nogil:
    cdef Prefault* job = <Prefault*>arg
    madvise(job.start, job.length, MADV_POPULATE_WRITE_)
    return NULL


cdef inline void prefault_start(Prefault* job, char* begin, char* end) noexcept nogil:
    """Fault in the whole pages of [begin, end) on a background thread (if worthwhile)."""
    cdef size_t page = rvasync_page_size()
    cdef size_t first = (<size_t>begin + page - 1) & ~(page - 1)
    cdef size_t last = (<size_t>end) & ~(page - 1)
    job.running = False
    if last <= first or rvasync_online_cpus() < 2:
        return
    job.start = <char*>first
    job.length = last - first
    job.running = pthread_create(&job.thread, NULL, _run_prefault, job) == 0


cdef inline void prefault_wait(Prefault* job) noexcept nogil:
    """Wait for the background thread, if one runs (before the buffer may be freed)."""
    if job.running:
        pthread_join(job.thread, NULL)
        job.running = False
