import StrataCore

// After a database is moved aside while the store runs (a failed quick_check, corruption met
// by a read or a write): the records SQLite had applied to it and that the durability log's
// segments still hold are applied again into the fresh file, as the open path does by
// replaying from the log's first position. Writer thread only.
extension DiskTier {
    /// Applies the log records before `end` (the position the moved-aside file had applied)
    /// found in the log's segments to the fresh database, in log order — a flush of the disk
    /// tier alone (the memory tier holds newer items) — and records `end` as applied. An
    /// outside review (op4) lost 200 items the log still held when quick_check moved a
    /// damaged file aside at run time: only the records not yet applied filled the fresh one.
    /// Costs one read of the segments (at most the log's retained bytes) and their rows'
    /// writes. Records older than the oldest segment are gone with the moved file.
    func refillFromLog(upTo end: UInt64) {
        guard end > 0, writer != nil else { return }
        let directory = config.directory + "/log"
        var writes: [LoggedWrite] = []
        var undecodable = 0
        for start in LogFiles.segmentStarts(in: directory) where start < end {
            // A segment let go meanwhile is gone: its records went with the moved file.
            guard let bytes = try? LogFiles.readWholeFile(directory + "/" + LogSegment.fileName(start: start)) else { continue }
            _ = bytes.withUnsafeBytes { raw in
                LogSegment.scan(raw, expectedStart: start) { position, record in
                    let recordEnd = position + UInt64(record.encodedSize)
                    guard recordEnd <= end else { return false }
                    guard var w = LoggedWrite.reading(record, position: position, end: recordEnd, decode: { encoding, stored, size in
                        stored.withUnsafeBytes { codec.decode(encoding, $0, size: size) }
                    }) else {
                        undecodable += 1
                        return true
                    }
                    w.keepsMemory = true // a flush: of the disk tier alone (memory holds newer items)
                    writes.append(w)
                    return true
                }
            }
        }
        // Batches of puts and deletes, each flush alone (as the applier sends them); the last
        // one records `end` as the fresh file's applied position.
        var failed = false
        func commit(_ items: [LoggedWrite], last: Bool) {
            guard !failed, writer != nil else { return }
            let job = DiskJob(.applyLog(items, end: last ? end : nil), inline: true) { if case .failure = $0 { failed = true } }
            commitLog(items, end: last ? end : nil, job: job)
        }
        var batch: [LoggedWrite] = []
        for (i, w) in writes.enumerated() {
            let last = i == writes.count - 1
            if w.item == nil {
                if !batch.isEmpty { commit(batch, last: false); batch = [] }
                commit([w], last: last)
            } else {
                batch.append(w)
                if batch.count >= 4096 || last { commit(batch, last: last); batch = [] }
            }
        }
        if writes.isEmpty { commit([], last: true) }
        log("level=\(failed ? "error" : "warn") event=disk_refilled_from_log records=\(writes.count) undecodable=\(undecodable) applied=\(end)\(failed ? " error=\"a batch could not be applied\"" : "")")
    }
}
