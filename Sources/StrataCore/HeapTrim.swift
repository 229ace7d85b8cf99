import CLinux

/// Gives the heap's free memory back to the kernel (glibc's `malloc_trim(0)`: every arena's
/// free pages, not only the top of the main heap). glibc otherwise keeps what a burst of large
/// allocations freed in its per-thread arenas: an outside review saw a node's anonymous memory
/// stay at ~0.9 GiB after a flood of 1 MiB writes whose every buffer had been freed. Costs a
/// walk of the arenas (milliseconds, taking each arena's lock in turn): call it off the hot
/// path, after a burst. True when memory was released.
@discardableResult
public func trimHeap() -> Bool { strata_malloc_trim() != 0 }
