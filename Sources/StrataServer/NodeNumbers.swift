#if canImport(Glibc)
import Glibc
#endif
import StrataCore

/// One number the node reports: its STATS name (PROTOCOL.md §7.13), its /metrics name (with
/// `strata_` before it and, for a counter, `_total` after), kind, help text and value. One
/// table (`Node.numbers()`) serves both, so the two cannot drift apart.
struct NodeNumber {
    enum Kind: String { case counter, gauge }
    let stats: String
    let metric: String
    let kind: Kind
    let help: String
    let value: Double

    init<T: BinaryInteger>(_ stats: String, metric: String? = nil, _ kind: Kind, _ help: String, _ value: T) {
        self.init(stats, metric: metric, kind, help, Double(value))
    }

    init(_ stats: String, metric: String? = nil, _ kind: Kind, _ help: String, _ value: Double) {
        self.stats = stats; self.metric = metric ?? stats; self.kind = kind; self.help = help; self.value = value
    }

    /// The value as STATS writes it (a whole number).
    var statsText: String { String(Int64(value)) }
}

extension Node {
    /// Every plain number of STATS and /metrics, in STATS order; the cluster's last. (Labelled
    /// families — requests and latency by operation, images by format, memcached commands,
    /// namespaces — are written by each format itself.)
    func numbers() -> [NodeNumber] {
        let s = store.stats(includeNamespaces: false)
        return [
            NodeNumber("uptime_s", metric: "uptime_seconds", .gauge, "Seconds since the node started.", monotonicSeconds() - stats.started),
            NodeNumber("connections_current", .gauge, "Open client connections.", stats.connectionsCurrent.load(ordering: .relaxed)),
            NodeNumber("connections_total", metric: "connections", .counter, "Client connections accepted.", stats.connectionsTotal.load(ordering: .relaxed)),
            NodeNumber("connections_refused", .counter, "Connections refused over the limit, out of descriptors, or while draining.", stats.connectionsRefused.load(ordering: .relaxed)),
            NodeNumber("max_connections", .gauge, "The connection limit in force (--max-connections, lowered to fit the descriptor limit).", effectiveMaxConnections),
            NodeNumber("max_item_bytes", .gauge, "The largest value the node stores (--max-item).", config.maxItem),
            NodeNumber("memory_limit_bytes", .gauge, "The memory tier's limit (--memory-limit; 0: no memory tier).", config.memoryLimit),
            NodeNumber("disk_limit_bytes", .gauge, "The data directory's limit (--disk-limit; 0: none).", config.diskLimit),
            NodeNumber("log_limit_bytes", .gauge, "The durability log's backlog limit in force (--log-limit, fitted to the disk limit).", store.configuration.logLimit),
            NodeNumber("connections_unauthenticated", .gauge, "Open connections that have not authenticated (a token is set).", stats.connectionsUnauthenticated.load(ordering: .relaxed)),
            NodeNumber("auth_timeouts", .counter, "Connections closed for sending no HELLO with the token within --auth-timeout.", stats.authTimeouts.load(ordering: .relaxed)),
            NodeNumber("pauses_noticed", .counter, "Times the node noticed it had been paused (no event loop ran for --pause-threshold): HELLO then reports a new start version.", stats.pausesNoticed.load(ordering: .relaxed)),
            NodeNumber("auth_evictions", .counter, "Unauthenticated connections closed to make room past --max-unauthenticated.", stats.authEvictions.load(ordering: .relaxed)),
            NodeNumber("accept_errors", .counter, "accept() calls that failed (out of file descriptors, or refused by the kernel).", stats.acceptErrors.load(ordering: .relaxed)),
            NodeNumber("bytes_in", .counter, "Bytes read from clients.", stats.bytesIn.load(ordering: .relaxed)),
            NodeNumber("bytes_out", .counter, "Bytes written to clients.", stats.bytesOut.load(ordering: .relaxed)),
            NodeNumber("buffered_bytes", .gauge, "Bytes buffered for all connections (input and output).", stats.bufferedBytes.load(ordering: .relaxed)),
            NodeNumber("heap_trims", .counter, "Times the heap's free memory was given back to the kernel (after 64 MiB of client traffic, once calm).", memoryRelease.trims.load(ordering: .relaxed)),
            NodeNumber("output_bytes", .gauge, "Unsent response bytes across connections (bounded by --max-output-bytes).", outputBudget.bytes),
            NodeNumber("output_peak_bytes", .gauge, "The most unsent response bytes across connections since the node started.", outputBudget.peakBytes),
            NodeNumber("output_held_requests", .counter, "Requests held back while unsent output was over --max-output-bytes.", outputBudget.heldRequests.load(ordering: .relaxed)),
            NodeNumber("busy_refusals", .counter, "Requests answered BUSY.", stats.busyRefusals.load(ordering: .relaxed)),
            NodeNumber("disk_full_refusals", .counter, "Writes refused for lack of disk space (DISK_FULL; memcached SERVER_ERROR out of memory storing object).", stats.diskFullRefusals.load(ordering: .relaxed)),
            NodeNumber("loop_disk_reads", .counter, "GETs (and memcached get keys) whose disk-tier read ran on their event loop (the files were in the page cache).", stats.loopDiskReads.load(ordering: .relaxed)),
            NodeNumber("malformed_frames", .counter, "Frames refused as malformed or too large.", stats.malformedFrames.load(ordering: .relaxed)),
            NodeNumber("output_cap_cutoffs", .counter, "Connections cut off for not reading their answers.", stats.outputCapCutoffs.load(ordering: .relaxed)),
            NodeNumber("timeouts", .counter, "Connections closed by the frame, idle or output timeouts.", stats.timeouts.load(ordering: .relaxed)),
            NodeNumber("auth_failures", .counter, "Authentications with a wrong token (HELLO, memcached's authentication set).", stats.authFailures.load(ordering: .relaxed)),
            NodeNumber("auth_delayed", .counter, "Failed authentications answered after a delay (past 5 failures from one address within a minute).", stats.authDelayed.load(ordering: .relaxed)),
            NodeNumber("auth_throttled_addresses", .gauge, "Source addresses with failed authentications tracked (at most 10,000; kept a minute).", authThrottle.count),
            NodeNumber("forbidden", .counter, "Requests refused because the user's role or namespaces do not allow them (FORBIDDEN).", stats.forbidden.load(ordering: .relaxed)),
            NodeNumber("credentials_users", .gauge, "Users the node knows (--credentials, plus --auth-token-file's).", credentials.current?.users.count ?? 0),
            NodeNumber("credentials_reloads", .counter, "Credential reloads (SIGHUP) that took effect.", stats.credentialsReloads.load(ordering: .relaxed)),
            NodeNumber("credentials_reload_failures", .counter, "Credential reloads refused (bad file): the previous users stay.", stats.credentialsReloadFailures.load(ordering: .relaxed)),
            NodeNumber("tls_connections", .counter, "Connections accepted on the TLS ports (binary, memcached, metrics).", stats.tlsConnections.load(ordering: .relaxed)),
            NodeNumber("tls_handshake_failures", .counter, "TLS handshakes that failed (not TLS, a certificate refused, or cut by --frame-timeout).", stats.tlsHandshakeFailures.load(ordering: .relaxed)),
            NodeNumber("tls_reloads", .counter, "Certificate reloads (SIGHUP) that took effect.", stats.tlsReloads.load(ordering: .relaxed)),
            NodeNumber("tls_reload_failures", .counter, "Certificate reloads that failed (the old certificate stays in use).", stats.tlsReloadFailures.load(ordering: .relaxed)),
            NodeNumber("disk_jobs_outstanding", .gauge, "Disk-tier jobs queued or running on workers.", workers.outstanding),
            NodeNumber("memory_items", .gauge, "Items in the memory tier.", s.memory.items),
            NodeNumber("memory_bytes", .gauge, "Bytes accounted by the memory tier (records and ghost queues).", s.memory.bytes),
            NodeNumber("memory_hits", .counter, "Memory-tier hits.", s.memory.hits),
            NodeNumber("memory_misses", .counter, "Memory-tier misses.", s.memory.misses),
            NodeNumber("memory_evictions", .counter, "Items evicted from memory.", s.memory.evictions),
            NodeNumber("memory_expirations", .counter, "Expired items dropped from memory.", s.memory.expirations),
            NodeNumber("memory_compressed_items", .gauge, "Memory-tier items whose value is held compressed (--memory-compression).", s.memoryCompressedItems),
            NodeNumber("memory_compressed_writes", .counter, "Values the memory tier stored compressed.", s.memoryCompressedWrites),
            NodeNumber("memory_dictionaries", .gauge, "Compression dictionaries trained for --memory-compression namespaces.", s.memoryDictionaries),
            NodeNumber("memory_dictionary_bytes", .gauge, "Memory the compression dictionaries hold (outside --memory-limit).", s.memoryDictionaryBytes),
            NodeNumber("memory_dictionary_failures", .counter, "Dictionary trainings whose samples taught nothing (the namespace stays uncompressed).", s.memoryDictionaryFailures),
            NodeNumber("disk_items", .gauge, "Rows in the disk tier (tombstones included).", s.disk.items),
            NodeNumber("disk_bytes", .gauge, "Bytes on disk (database file, WAL and durability log).", s.disk.bytes),
            NodeNumber("disk_hits", .counter, "Disk-tier hits.", s.disk.hits),
            NodeNumber("disk_misses", .counter, "Disk-tier misses.", s.disk.misses),
            NodeNumber("disk_evictions", .counter, "Rows evicted from disk.", s.disk.evictions),
            NodeNumber("disk_expirations", .counter, "Expired rows swept from disk.", s.disk.expirations),
            NodeNumber("disk_commits", .counter, "Disk-tier transactions committed.", s.commits),
            NodeNumber("disk_write_errors", .counter, "Disk writes that failed.", s.diskWriteErrors),
            NodeNumber("disk_wal_copies", .counter, "WAL checkpoints copied by the checkpoint thread.", s.walCopies),
            NodeNumber("disk_writer_checkpoints", .counter, "WAL checkpoints the writer did alone (copier absent or far behind).", s.writerCheckpoints),
            NodeNumber("corrupt_items", .counter, "Items that failed their checksum.", s.corruptItems),
            NodeNumber("quarantines", .counter, "Databases moved aside as corrupt.", s.quarantines),
            NodeNumber("write_behind_total", metric: "write_behind", .counter, "Write-behind writes accepted.", s.writeBehindTotal),
            NodeNumber("write_behind_pending", .gauge, "Write-behind writes not yet committed.", s.writeBehindPending),
            NodeNumber("write_behind_pending_bytes", .gauge, "Bytes of write-behind writes not yet in the log (bounded by --max-write-behind-bytes).", s.writeBehindPendingBytes),
            NodeNumber("write_behind_peak_bytes", .gauge, "The most bytes of write-behind writes not yet in the log at once since the node started.", s.writeBehindPeakBytes),
            NodeNumber("log_bytes", .gauge, "Bytes of the durability log's segment files.", s.logBytes),
            NodeNumber("log_backlog_records", .gauge, "Writes in the durability log not yet applied to SQLite.", s.logBacklogRecords),
            NodeNumber("log_backlog_bytes", .gauge, "Log bytes not yet applied to SQLite.", s.logBacklogBytes),
            NodeNumber("log_syncs", .counter, "fdatasync calls on the durability log.", s.logSyncs),
            NodeNumber("log_backpressure_waits", .counter, "Writes that waited for the applier (backlog at --log-limit).", s.logBackpressureWaits),
            NodeNumber("log_write_errors", .counter, "Log records whose batch could not be written (waiting writers got the error; kept write-behind records count again at each failed retry).", s.logWriteErrors),
            NodeNumber("log_apply_errors", .counter, "Batches SQLite refused to apply (retried).", s.logApplyErrors),
            NodeNumber("log_applied_records", .counter, "Log records applied to SQLite.", s.logAppliedRecords),
            NodeNumber("compression_raw_bytes", .counter, "Value bytes written to disk before compression.", s.rawBytesWritten),
            NodeNumber("compression_stored_bytes", .counter, "Value bytes written to disk after compression.", s.storedBytesWritten),
            NodeNumber("variants_computed", .counter, "Image variants computed.", stats.variantsComputed.load()),
            NodeNumber("variant_hits", .counter, "Image variants served from the cache.", stats.variantHits.load()),
            NodeNumber("variants_dropped", .counter, "Stored image variants removed because their original changed.", stats.variantsDropped.load()),
            NodeNumber("variants_not_stored", .counter, "Image variants answered without being stored: their original already had 32 stored variants.", stats.variantsNotStored.load()),
            NodeNumber("image_transform_us", .counter, "Microseconds spent computing image variants.", stats.transformMicros.load()),
            NodeNumber("leases_granted", .counter, "Read-through leases granted.", stats.leasesGranted.load()),
            NodeNumber("leases_filling", .counter, "Lease GETs told another client is filling the key.", stats.leasesFilling.load()),
            NodeNumber("leases_lost", .counter, "Fills refused because their lease had expired or was revoked.", stats.leasesLost.load()),
            NodeNumber("leases_held", .gauge, "Leases currently held.", dispatcher.leases.count),
            NodeNumber("negative_hits", .counter, "Negative entries (cached load failures) served.", stats.negativeHits.load()),
            NodeNumber("stale_hits", .counter, "Stale (invalidated) items served.", stats.staleHits.load()),
        ] + clusterNumbers()
    }
}
