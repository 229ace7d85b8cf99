#if canImport(Glibc)
import Glibc
#endif
import StrataNet
import StrataWire

/// A connection's unsent responses, in order, sent with gathered writes (`sendmsg`).
///
/// Small frames are encoded into owned byte chunks; a value of `shareThreshold` bytes or more
/// is not copied: the queue keeps a reference to the response's own array (Swift arrays are
/// copy-on-write, so the stored or read value is shared, not duplicated) and sends from it.
/// So a 32 MiB GET answer costs the queue 32 bytes of header plus a reference, and many
/// connections answering the same value share one buffer.
///
/// Costs: one `sendmsg` per `send` call for up to `maxIovecs` chunks; appending a small frame
/// copies it once into the tail chunk; sent chunks are dropped as soon as they are sent, but
/// for the last owned one of up to 16 KiB, kept empty for the next answers (so a connection
/// allocates no chunk per answer, and holds that much while idle).
/// Not thread-safe (a connection's loop owns it).
struct OutputQueue {
    /// Values at least this large are sent from their own array.
    static let shareThreshold = 16 << 10
    /// Owned chunks are not grown past this (a new one is started).
    static let chunkLimit = 256 << 10
    static let maxIovecs = 64

    private var chunks: [[UInt8]] = []
    /// The last owned chunk once sent, emptied and kept for the next answer (a connection
    /// answering one request at a time then allocates no chunk per answer).
    private var spare: [UInt8] = []
    /// Whether the last chunk is owned (small frames may be appended to it).
    private var tailOwned = false
    /// Index of the first unsent chunk, and the bytes of it already sent.
    private var head = 0
    private var offset = 0
    /// Unsent bytes.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    mutating func append(_ frame: Frame) {
        let share = frame.value.count >= Self.shareThreshold
        let ownedBytes = frame.encodedSize - (share ? frame.value.count : 0)
        if !tailOwned || chunks[chunks.count - 1].count + ownedBytes > Self.chunkLimit {
            startOwnedChunk(reserving: ownedBytes)
        }
        let last = chunks.count - 1
        if share {
            frame.encodeHead(into: &chunks[last])
            chunks.append(frame.value)
            tailOwned = false
        } else {
            frame.encode(into: &chunks[last])
        }
        count += frame.encodedSize
    }

    /// Appends an answer whose parts lie elsewhere (the GET fast path: the header encoded on
    /// the stack, extended data and value in the memory tier's record): each part is copied
    /// once, into the tail chunk, or — a value of `shareThreshold` bytes or more — into a
    /// chunk of its own.
    mutating func append(head: UnsafeRawBufferPointer, extended: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        let share = value.count >= Self.shareThreshold
        let ownedBytes = head.count + extended.count + (share ? 0 : value.count)
        if !tailOwned || chunks[chunks.count - 1].count + ownedBytes > Self.chunkLimit {
            startOwnedChunk(reserving: ownedBytes)
        }
        let last = chunks.count - 1
        chunks[last].append(contentsOf: head)
        if extended.count > 0 { chunks[last].append(contentsOf: extended) }
        if share {
            chunks.append([UInt8](value))
            tailOwned = false
        } else if value.count > 0 {
            chunks[last].append(contentsOf: value)
        }
        count += head.count + extended.count + value.count
    }

    /// Appends what `body` writes at the end of the owned tail chunk (text-protocol answers,
    /// which are built in place: no buffer of their own, no second copy), and returns what
    /// `body` returns. `body` must only append.
    mutating func appendOwned<R>(_ body: (inout [UInt8]) -> R) -> R {
        if !tailOwned || chunks[chunks.count - 1].count >= Self.chunkLimit {
            startOwnedChunk(reserving: 0)
        }
        let last = chunks.count - 1
        let before = chunks[last].count
        let r = body(&chunks[last])
        count += chunks[last].count - before
        return r
    }

    /// Appends raw bytes already encoded (an unsolicited frame, a worker's answers): the
    /// array itself becomes a chunk (not copied).
    mutating func append(bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        chunks.append(bytes)
        tailOwned = false
        count += bytes.count
    }

    private mutating func startOwnedChunk(reserving bytes: Int) {
        var c: [UInt8] = []
        swap(&c, &spare)
        c.reserveCapacity(max(bytes, min(Self.chunkLimit, 4096)))
        chunks.append(c)
        tailOwned = true
    }

    /// Sends what the socket takes: `.done(n)` with the bytes sent (0 when nothing was
    /// pending), `.wouldBlock` when the socket took nothing.
    mutating func send(_ fd: Int32) throws(SystemError) -> IOResult {
        guard count > 0 else { return .done(0) }
        let end = min(chunks.count, head + Self.maxIovecs)
        let result: Result<IOResult, SystemError>
        if end - head == 1 {
            // One chunk (an answer to one request): a plain send, no iovec.
            let skip = offset
            result = chunks[head].withUnsafeBytes { p in
                do throws(SystemError) {
                    return .success(try Sys.send(fd, p.baseAddress! + skip, p.count - skip))
                } catch { return .failure(error) }
            }
        } else {
            // The iovecs live on the stack (at most `maxIovecs`), not in a heap block per send.
            result = withUnsafeTemporaryAllocation(of: iovec.self, capacity: end - head) { iov in
                gather(from: head, to: end, into: iov, filled: 0, fd: fd)
            }
        }
        let r = try result.get()
        if case .done(let n) = r { consume(n) }
        return r
    }

    /// Pins chunks `i..<end` one by one (nested `withUnsafeBytes`), then sends them all.
    private func gather(from i: Int, to end: Int, into iov: UnsafeMutableBufferPointer<iovec>, filled: Int,
                        fd: Int32) -> Result<IOResult, SystemError> {
        if i == end {
            do throws(SystemError) {
                return .success(try Sys.sendv(fd, UnsafeMutableBufferPointer(rebasing: iov[0..<filled])))
            } catch { return .failure(error) }
        }
        return chunks[i].withUnsafeBytes { p in
            let skip = i == head ? offset : 0
            iov[filled] = iovec(iov_base: UnsafeMutableRawPointer(mutating: p.baseAddress! + skip), iov_len: p.count - skip)
            return gather(from: i + 1, to: end, into: iov, filled: filled + 1, fd: fd)
        }
    }

    /// The first unsent chunk's unsent bytes (never empty while `count > 0`): empty chunks
    /// before it are dropped first — an owned chunk started for a text-protocol command that
    /// appended nothing (a get that missed in memory goes on to a worker), which a gathered
    /// `sendmsg` passes over but a TLS write of zero bytes would stall on.
    mutating func withHead<T>(_ body: (UnsafeRawBufferPointer) -> T) -> T {
        while count > 0 && chunks[head].count == offset {
            chunks[head] = []
            head += 1
            offset = 0
        }
        return chunks[head].withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
    }

    mutating func consume(_ sent: Int) {
        count -= sent
        var n = sent
        while n > 0 {
            let left = chunks[head].count - offset
            if n >= left {
                n -= left
                if head == chunks.count - 1 && tailOwned && chunks[head].capacity <= 16 << 10 {
                    swap(&spare, &chunks[head]) // an owned chunk: only this queue holds it
                    spare.removeAll(keepingCapacity: true)
                }
                chunks[head] = [] // release the chunk (or this reference to a shared value) now
                head += 1
                offset = 0
            } else {
                offset += n
                n = 0
            }
        }
        if head == chunks.count {
            chunks.removeAll(keepingCapacity: chunks.capacity <= 64)
            head = 0
            tailOwned = false
        } else if head >= 64 && head * 2 >= chunks.count {
            chunks.removeFirst(head)
            head = 0
        }
    }

    /// Drops everything (the connection closed).
    mutating func removeAll() {
        chunks = []
        spare = []
        head = 0
        offset = 0
        count = 0
        tailOwned = false
    }
}
