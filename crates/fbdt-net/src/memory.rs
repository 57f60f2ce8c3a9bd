//! The allocator settings every process that runs FBDT sessions should start with.

/// Keeps glibc's allocator from handing freed buffers back to the kernel at once. FBDT's
/// buffers (256 KiB write copies, 64 KiB read blocks, held until acknowledged or read) are
/// freed in bursts; by default glibc then trims its heap or unmaps the chunk, and the next
/// allocation faults every page in again — on loopback that cost more CPU than all the
/// copies (page faults were 12× fewer with these settings, CPU per GiB ~1.6× lower).
/// Chunks below 1 MiB come from the heap; up to 64 MiB of free heap is kept, about one
/// session's core buffers. Call it first in `main`, before any other thread exists (the
/// `fbdt` binary and the lab, whose testbed runs FBDT's ends in-process, both do).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; the caller runs before other threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}
