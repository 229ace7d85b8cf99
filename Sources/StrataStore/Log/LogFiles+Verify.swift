import StrataCore

// `strata check`'s read-only pass over the log (`DiskTier.check`): the node's own open is
// `LogFiles.replay`, which also repairs what it finds.
extension LogFiles {
    /// What `verify` found.
    struct Verification {
        var segments = 0, records = 0, unapplied = 0, tornBytes = 0
        var damage: [String] = []
    }

    /// Reads every segment in `directory` without changing anything (`strata check`): counts
    /// whole records (and those at or after `applied`), a torn tail at the very end (a crash's
    /// cut write, repaired at the next open), and reports any damage.
    static func verify(directory: String, applied: UInt64) -> Verification {
        var v = Verification()
        let starts = segmentStarts(in: directory)
        // The first segment holds the applied position (or starts at it): before that are
        // records SQLite never got. (Not after a damage the node already handled: it moved the
        // damaged part aside as *.damaged-* and went on past every position it used.)
        let names = fileNames(in: directory)
        let handledDamage = names.contains { $0.contains(".damaged-") }
        // A file that looks like a segment but is not one the node would read (a name out of
        // range): it is ignored at open, so what it holds is never replayed.
        for n in names where n.hasSuffix(".seg") && LogSegment.start(fromFileName: n) == nil {
            v.damage.append("\(directory)/\(n): not a segment name the node reads (20 digits within 0…2^64−1); it is ignored")
        }
        // Damage a start already handled: its files, kept aside, are what is left of records
        // that were not replayed — reported until they are removed (an outside review, nu5:
        // `check` called such a directory clean).
        for n in names.sorted() where n.contains(".damaged-") {
            v.damage.append("\(directory)/\(n): kept aside by a start that found the log damaged (event=log_damaged): the records from its damage on were not replayed")
        }
        var expected: UInt64? = handledDamage ? nil : starts.first.map { $0 > applied && applied > 0 ? applied : $0 }
        for (i, start) in starts.enumerated() {
            let path = directory + "/" + LogSegment.fileName(start: start)
            guard let bytes = try? readWholeFile(path) else { v.damage.append("\(path): cannot be read"); continue }
            v.segments += 1
            // Segments follow one another: each starts where the one before it ends. A gap is
            // records lost (a segment cut short or removed by hand), which no crash makes.
            if let e = expected, e != start, bytes.count >= LogSegment.headerBytes, !handledDamage {
                v.damage.append(e < start ? "\(path): positions \(e)..<\(start) are missing before it (a segment cut short or removed)"
                                          : "\(path): starts at \(start), inside the segment before it (which ends at \(e))")
            }
            expected = start + UInt64(max(0, bytes.count - LogSegment.headerBytes))
            let end = bytes.withUnsafeBytes { raw in
                LogSegment.scan(raw, expectedStart: start) { position, _ in
                    v.records += 1
                    if position >= applied { v.unapplied += 1 }
                    return true
                }
            }
            switch end {
            case .clean: break
            case .tornTail(let offset) where i == starts.count - 1: v.tornBytes = bytes.count - offset
            case .tornTail(let offset): v.damage.append("\(path) at \(offset): a record is cut short but later segments follow")
            case .damaged(let offset, let reason): v.damage.append("\(path) at \(offset): \(reason)")
            case .badHeader(let reason): v.damage.append("\(path): \(reason)")
            }
        }
        // No segment at all while SQLite applied records from the log: removed by hand (the
        // node always keeps its tail segment; an outside review, dur15, removed them all).
        if starts.isEmpty, applied > 0, !handledDamage, v.damage.isEmpty {
            v.damage.append("\(directory): holds no log segment, but SQLite has applied the log up to \(applied): the log was removed; writes acknowledged after \(applied), if any, are lost")
        }
        // The log ends before what SQLite applied from it: the last segment was cut short (an
        // outside review truncated it to 0 bytes and `check` called the directory clean).
        // (The end of its last whole record, as the node's `log_shorter_than_applied log_end=`
        // says: a torn tail is reported apart — an outside review, dur15 G3.)
        if let e = expected.map({ $0 - UInt64(v.tornBytes) }), e < applied, !handledDamage, v.damage.isEmpty {
            v.damage.append("\(directory): the log ends at \(e), before the position SQLite has applied (\(applied)): a segment was cut short; writes acknowledged after \(applied), if any, are lost")
        }
        return v
    }
}
