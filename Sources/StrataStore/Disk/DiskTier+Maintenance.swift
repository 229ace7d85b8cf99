#if canImport(Glibc)
import Glibc
#endif
import CLinux
import StrataCore
import Synchronization

// Background maintenance on the writer thread: sweeps, free pages, buffered access times.
extension DiskTier {
    // MARK: Maintenance

    func maintenance(force: Bool) {
        let now = monotonicSeconds()
        guard force || now - lastMaintenance >= config.maintenanceInterval else { return }
        lastMaintenance = now
        guard let db = writer else { return }
        if needsRecount { recountRows() }
        flushAccessTimes()
        do {
            try sweepStep(db)
            try trimIfOver(db)
            // The pages a vacuum moved are in the WAL: copy them out in time, as after a batch
            // (at once when the file is over the high-water mark). Over it — a limit lowered at
            // a restart — up to 8 steps a pass, each checkpointed, for at most 50 ms: one step
            // a pass took a 263 MB directory 131 s to get under an 8 MiB limit (an outside review).
            let started = monotonicSeconds()
            for _ in 0..<8 {
                let shrinking = try vacuumIfWorthIt(db)
                checkpointIfDue(shrinking: shrinking)
                if !shrinking || monotonicSeconds() - started > 0.05 { break }
            }
            bytesEstimate = try bytesInUse(db)
            counters.bytesOnDisk.store(try bytesOnDisk(db), ordering: .relaxed)
        } catch let e as SQLiteError {
            if e.isCorruption { quarantineAndReopen(reason: "during maintenance: \(e.message)") }
        } catch {}
    }

    /// Evicts what the limits require without waiting for a write: a `--disk-limit` or
    /// `--disk-count-limit` lowered at a restart left the directory at 2–3 × the new limit until
    /// writes came (an outside review). The freed pages then go back to the file system by
    /// `vacuumIfWorthIt`, a step per maintenance pass. The byte limit is held here against the
    /// database's data pages only: what the WAL and the log's segments hold beyond their room
    /// is given back by checkpoints and the applier, and evicting rows cannot shrink it —
    /// counting it emptied the whole store right after a reopen, while the replayed log's
    /// segments were still on disk. Cheap when under the limits (the byte estimate, or a row
    /// count compare).
    func trimIfOver(_ db: SQLiteConnection) throws {
        let overCount = rowCount > config.diskCountLimit
        let overBytes = try budget.isLimited && bytesEstimate > budget.highWater && dataBytes(db) > budget.highWater
        guard overCount || overBytes else { return }
        var staged = Staged()
        try db.beginImmediate()
        let newCounters: PersistedCounters
        do {
            if overCount { try evict(db, &staged, untilCount: config.diskCountLimit, bytes: Int.max) }
            if overBytes { try evict(db, &staged, untilCount: Int.max, bytes: budget.lowWater, dataOnly: true) }
            newCounters = try writeCounters(db, rows: rowCount + staged.rowDelta, version: maxVersion, exact: false)
            try db.commit()
        } catch {
            db.rollback()
            throw error
        }
        adopt(staged, newCounters)
    }

    /// Looks at the next `sweepBatch` rows: drops expired items and items past `maxAge` (both
    /// counted as expirations), expired tombstones, rows of flushed generations and (with an
    /// age limit) rows not accessed for too long. With `expiredItemsLeaveTombstones` an expired
    /// item becomes a tombstone of its version, kept until `tombstoneTTL` past its expiry.
    func sweepStep(_ db: SQLiteConnection) throws {
        let now = clock.nowMicros()
        let ageCutoff = config.diskAgeLimit > 0 ? now / 1_000_000 - Int64(min(config.diskAgeLimit, 1e12)) : Int64.min
        let oldest = maxAge.oldestVersion(now: now)
        let s = try db.prepared("SELECT id, ns, gen, expiry, tombstone, access, version, key FROM items WHERE id > ? ORDER BY id LIMIT ?")
        s.bind(1, sweepCursor)
        s.bind(2, config.sweepBatch)
        var doomed: [Int64] = []
        // Expired items that become tombstones: namespace id, generation, key, version, the tombstone's expiry.
        var entombed: [(ns: Int64, gen: Int64, key: [UInt8], version: UInt64, until: Int64)] = []
        let tombstoneMicros = Int64(min(config.tombstoneTTL, 1e12) * 1e6)
        var expired = 0, aged = 0, collected = 0
        var last: Int64 = sweepCursor
        var seen = 0
        while try s.step() {
            seen += 1
            let id = s.int(0)
            last = id
            let expiry = s.int(3)
            let tombstone = s.int(4) & 1 != 0
            if config.expiredItemsLeaveTombstones, !tombstone, expiry != 0, expiry <= now,
               expiry > now - tombstoneMicros, registry.generation(ofDiskID: s.int(1)) == s.int(2) {
                entombed.append((s.int(1), s.int(2), s.bytes(7), UInt64(bitPattern: s.int(6)), expiry + tombstoneMicros))
                expired += 1
            } else if (expiry != 0 && expiry <= now) || (!tombstone && UInt64(bitPattern: s.int(6)) < oldest) {
                doomed.append(id); if !tombstone { expired += 1 }
            } else if registry.generation(ofDiskID: s.int(1)) != s.int(2) {
                doomed.append(id); collected += 1
            } else if s.int(5) < ageCutoff && !(tombstone && config.expiredItemsLeaveTombstones) {
                // (A tombstone kept for replicas lives its own lifetime, not the idle age.)
                // Read from memory within the limit (its reads never reach the disk's access
                // time): kept, and its access recorded — an outside review lost the disk copy
                // of an item read every second, and so lost it at the next restart.
                if let idle = memoryIdleSeconds, let name = registry.name(ofDiskID: s.int(1)),
                   let seconds = idle(name, s.bytes(7)), Double(seconds) < config.diskAgeLimit {
                    recordAccess(nsID: s.int(1), key: s.bytes(7), now: now - seconds * 1_000_000)
                } else {
                    doomed.append(id); aged += 1
                    rememberEviction(nsID: s.int(1), key: s.bytes(7), version: s.int(6), marks: s.int(4))
                }
            }
        }
        s.reset()
        sweepCursor = seen < config.sweepBatch ? 0 : last
        guard !doomed.isEmpty || !entombed.isEmpty else { return }
        try db.beginImmediate()
        do {
            let del = try db.prepared("DELETE FROM items WHERE id=?")
            var removed = 0
            for id in doomed {
                del.bind(1, id)
                try del.run()
                removed += db.changes
            }
            for t in entombed {
                // Only if the row is still that expired item (a write may have replaced it since it was read).
                let still = try db.prepared("SELECT 1 FROM items WHERE ns=? AND key=? AND version=? AND tombstone=0 AND expiry<>0 AND expiry<=?")
                still.bind(1, t.ns); still.bind(2, t.key); still.bind(3, Int64(bitPattern: t.version)); still.bind(4, now)
                let found = try still.step()
                still.reset()
                guard found else { continue }
                let state = ItemState(value: [], flags: 0, extended: [], expiry: t.until, version: t.version, marks: ItemMarks.tombstone)
                if try writeRow(db, nsID: t.ns, gen: t.gen, key: t.key, state: state, encoded: (.raw, []), now: now, mayExist: true) {
                    removed -= 1 // (never: the row was there)
                }
            }
            let p = try writeCounters(db, rows: rowCount - removed, version: maxVersion, exact: false)
            try db.commit()
            persisted = p
            rowCount -= removed
            counters.rows.store(rowCount, ordering: .relaxed)
            counters.expirations.add(expired, ordering: .relaxed)
            counters.evictions.add(aged, ordering: .relaxed)
            counters.flushedRowsCollected.add(collected, ordering: .relaxed)
        } catch {
            db.rollback()
            throw error
        }
    }

    /// Writes buffered access times in one transaction (a read never costs a write).
    func flushAccessTimes() {
        let batch: [AccessKey: Int64] = accessLock.withLock {
            let b = accessBuffer
            accessBuffer.removeAll(keepingCapacity: true)
            return b
        }
        guard !batch.isEmpty, let db = writer else { return }
        do {
            try db.beginImmediate()
            let s = try db.prepared("UPDATE items SET access=? WHERE ns=? AND key=? AND access<?")
            for (k, t) in batch {
                s.bind(1, t); s.bind(2, k.ns); s.bind(3, k.key); s.bind(4, t)
                try s.run()
            }
            try db.commit()
        } catch {
            db.rollback()
        }
    }

    /// A read of an item still in the log's backlog: its row's access time moves too, in case
    /// the applier wrote the row just before the read (the entry's time covers the other case).
    func noteAccess(namespace: [UInt8], key: [UInt8], now: Int64) {
        guard let nsID = registry.lookup(namespace)?.diskID else { return }
        recordAccess(nsID: nsID, key: key, now: now)
    }

    func recordAccess(nsID: Int64, key: [UInt8], now: Int64) {
        accessLock.withLock {
            if accessBuffer.count < 100_000 { accessBuffer[AccessKey(ns: nsID, key: key)] = now / 1_000_000 }
        }
    }
}
