#if canImport(Glibc)
import Glibc
#endif
import StrataCore

// LogFiles at open: scanning the segments, truncating a torn tail, setting damage aside.
// See LogFiles.swift for the guarantees.
extension LogFiles {
    // MARK: Replay

    /// The start positions of the segment files in `directory`, in order.
    static func segmentStarts(in directory: String) -> [UInt64] {
        fileNames(in: directory).compactMap(LogSegment.start(fromFileName:)).sorted()
    }

    /// The names of the entries in `directory` (none when it cannot be read).
    static func fileNames(in directory: String) -> [String] {
        guard let dir = opendir(directory) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let e = readdir(dir) {
            names.append(withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) })
        }
        return names
    }

    func replay(from: UInt64, clock: any Clock, visit: (UInt64, LogRecord) throws -> Void) throws -> OpenReport {
        var report = OpenReport()
        let starts = Self.segmentStarts(in: directory)
        // Segments follow one another. A gap — a segment removed or cut short by hand, which
        // no crash makes — that holds positions SQLite has not applied (at or past `from`) is
        // damage: replayed past, it undid acknowledged writes silently (an outside review,
        // dur13: 19 acknowledged deletes came back, nothing logged). Not after a damage already
        // handled: appends then went on past every position the moved files used.
        let handledDamage = Self.fileNames(in: directory).contains { $0.contains(".damaged-") }
        var expected: UInt64? = handledDamage ? nil : starts.first.map { $0 > from && from > 0 ? from : $0 }
        for (i, start) in starts.enumerated() {
            let path = directory + "/" + LogSegment.fileName(start: start)
            if let e = expected, e < start, start > from {
                report.damage.append((path, 0, "positions \(e)..<\(start) are missing before it (a segment cut short or removed)"))
                end = max(end, highestEnd(starts))
                quarantine(starts[i...], clock: clock)
                tailAppendable = false
                return report
            }
            let bytes = try readFile(path)
            if !handledDamage { expected = start + UInt64(max(0, bytes.count - LogSegment.headerBytes)) }
            let isLast = i == starts.count - 1
            // A segment wholly before `from` still has to verify its header (damage anywhere
            // is reported), but its records are not visited.
            var visitError: Error?
            let endState = bytes.withUnsafeBytes { raw in
                LogSegment.scan(raw, expectedStart: start) { position, record in
                    guard position >= from else { return true }
                    do { try visit(position, record); report.records += 1 } catch { visitError = error; return false }
                    return true
                }
            }
            if let e = visitError { throw e }
            switch endState {
            case .clean:
                segments.append(start)
                end = start + UInt64(bytes.count - LogSegment.headerBytes)
                tailAppendable = true
            case .tornTail(let offset) where isLast:
                if offset < LogSegment.headerBytes {
                    unlink(path) // the header itself never landed: the segment is started again
                    end = start
                } else {
                    guard truncate(path, off_t(offset)) == 0 else {
                        throw StoreError(.io, "cannot truncate the log's torn tail in \(path): \(String(cString: strerror(errno)))")
                    }
                    segments.append(start)
                    end = start + UInt64(offset - LogSegment.headerBytes)
                    tailAppendable = true
                }
                report.truncatedBytes += bytes.count - offset
            case .tornTail(let offset), .damaged(let offset, _):
                if i + 1 < starts.count && starts[i + 1] <= from {
                    // Damage (or a cut) in a segment SQLite has applied wholly — the next one
                    // starts at or before the applied position: nothing from it is needed, and
                    // the replay goes on (`strata check` still reports it). Treated as damage, it
                    // set aside every later segment and their unapplied records (an outside
                    // review, dur14: 20 of 20 acknowledged deletes undone by a cut applied segment).
                    segments.append(start)
                    end = start + UInt64(max(0, offset - LogSegment.headerBytes))
                    tailAppendable = false
                    continue
                }
                // Damage (or a record cut short with segments after it, which no crash makes):
                // the whole records before it were replayed and stay; a copy of the segment as
                // found is kept for the operator, the segment is cut at the damage, every later
                // segment is moved aside, and appends start a new segment past every position
                // those files used.
                var reason = "a record is cut short but later segments follow"
                if case .damaged(_, let r) = endState { reason = r }
                report.damage.append((path, offset, reason))
                end = max(end, highestEnd(starts))
                keepCopy(bytes, of: path, clock: clock)
                guard truncate(path, off_t(offset)) == 0 else {
                    throw StoreError(.io, "cannot cut the damaged log segment \(path): \(String(cString: strerror(errno)))")
                }
                segments.append(start)
                quarantine(starts[(i + 1)...], clock: clock)
                tailAppendable = false
                return report
            case .badHeader(let reason):
                if i + 1 < starts.count && starts[i + 1] <= from { // wholly applied, as above
                    segments.append(start)
                    tailAppendable = false
                    continue
                }
                report.damage.append((path, 0, reason))
                end = max(end, highestEnd(starts))
                quarantine(starts[i...], clock: clock)
                tailAppendable = false
                return report
            }
        }
        return report
    }

    /// The position just past every byte of every segment file (so no position is reused).
    private func highestEnd(_ starts: [UInt64]) -> UInt64 {
        starts.reduce(0) { acc, s in
            var st = stat()
            let size = stat(directory + "/" + LogSegment.fileName(start: s), &st) == 0 ? UInt64(st.st_size) : 0
            return max(acc, s + max(size, UInt64(LogSegment.headerBytes)) - UInt64(LogSegment.headerBytes))
        }
    }

    private func keepCopy(_ bytes: [UInt8], of path: String, clock: any Clock) {
        let copy = path + ".damaged-\(clock.nowMicros() / 1000)"
        let f = Glibc.open(copy, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard f >= 0 else { return }
        _ = bytes.withUnsafeBytes { Glibc.write(f, $0.baseAddress, $0.count) }
        _ = fsync(f)
        Glibc.close(f)
    }

    private func quarantine(_ starts: ArraySlice<UInt64>, clock: any Clock) {
        let stamp = clock.nowMicros() / 1000
        for s in starts {
            let path = directory + "/" + LogSegment.fileName(start: s)
            rename(path, path + ".damaged-\(stamp)")
        }
        syncDirectory()
    }

    private func readFile(_ path: String) throws -> [UInt8] { try Self.readWholeFile(path) }

    static func readWholeFile(_ path: String) throws -> [UInt8] {
        let f = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard f >= 0 else { throw StoreError(.io, "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { Glibc.close(f) }
        var st = stat()
        guard fstat(f, &st) == 0 else { throw StoreError(.io, "cannot stat \(path)") }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(f, $0.baseAddress! + done, $0.count - done) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            done += n
        }
        if done < bytes.count { bytes.removeLast(bytes.count - done) }
        return bytes
    }
}
