#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire
import StrataImage

extension Node {
    /// Every STATS counter in the Prometheus text format: counters as `_total` counters, levels
    /// as gauges, per-operation latency as histograms.
    func prometheusText() -> String {
        let s = store.stats()
        var out = ""
        // Text format 0.0.4: the HELP/TYPE lines name the metric exactly as its samples do
        // (counters end in _total).
        func metric(_ name: String, _ type: String, _ help: String, _ value: Double) {
            let full = "strata_\(name)\(type == "counter" ? "_total" : "")"
            out += "# HELP \(full) \(help)\n# TYPE \(full) \(type)\n\(full) \(format(value))\n"
        }
        func format(_ v: Double) -> String { v == v.rounded() && abs(v) < 1e15 ? String(Int64(v)) : String(v) }
        out += "# HELP strata_build_info The node's version.\n# TYPE strata_build_info gauge\nstrata_build_info{version=\"\(Node.version)\"} 1\n"
        metric("uptime_seconds", "gauge", "Seconds since the node started.", monotonicSeconds() - stats.started)
        metric("connections_current", "gauge", "Open client connections.", Double(stats.connectionsCurrent.load(ordering: .relaxed)))
        metric("connections", "counter", "Client connections accepted.", Double(stats.connectionsTotal.load(ordering: .relaxed)))
        metric("connections_refused", "counter", "Connections refused over the limit, out of descriptors, or while draining.", Double(stats.connectionsRefused.load(ordering: .relaxed)))
        metric("max_connections", "gauge", "The connection limit in force (--max-connections, lowered to fit the descriptor limit).", Double(effectiveMaxConnections))
        metric("connections_unauthenticated", "gauge", "Open connections that have not authenticated (a token is set).", Double(stats.connectionsUnauthenticated.load(ordering: .relaxed)))
        metric("pauses_noticed", "counter", "Times the node noticed it had been paused (no event loop ran for --pause-threshold): HELLO then reports a new start version.", Double(stats.pausesNoticed.load(ordering: .relaxed)))
        metric("auth_timeouts", "counter", "Connections closed for sending no HELLO with the token within --auth-timeout.", Double(stats.authTimeouts.load(ordering: .relaxed)))
        metric("auth_evictions", "counter", "Unauthenticated connections closed to make room past --max-unauthenticated.", Double(stats.authEvictions.load(ordering: .relaxed)))
        metric("accept_errors", "counter", "accept() calls that failed (out of file descriptors, or refused by the kernel).", Double(stats.acceptErrors.load(ordering: .relaxed)))
        metric("bytes_in", "counter", "Bytes read from clients.", Double(stats.bytesIn.load(ordering: .relaxed)))
        metric("bytes_out", "counter", "Bytes written to clients.", Double(stats.bytesOut.load(ordering: .relaxed)))
        metric("buffered_bytes", "gauge", "Bytes buffered for all connections (input and output).", Double(stats.bufferedBytes.load(ordering: .relaxed)))
        metric("busy_refusals", "counter", "Requests answered BUSY.", Double(stats.busyRefusals.load(ordering: .relaxed)))
        metric("output_bytes", "gauge", "Unsent response bytes across connections (bounded by --max-output-bytes).", Double(outputBudget.bytes))
        metric("output_peak_bytes", "gauge", "The most unsent response bytes across connections since the node started.", Double(outputBudget.peakBytes))
        metric("output_held_requests", "counter", "Requests held back while unsent output was over --max-output-bytes.", Double(outputBudget.heldRequests.load(ordering: .relaxed)))
        metric("malformed_frames", "counter", "Frames refused as malformed or too large.", Double(stats.malformedFrames.load(ordering: .relaxed)))
        metric("output_cap_cutoffs", "counter", "Connections cut off for not reading their answers.", Double(stats.outputCapCutoffs.load(ordering: .relaxed)))
        metric("timeouts", "counter", "Connections closed by the frame, idle or output timeouts.", Double(stats.timeouts.load(ordering: .relaxed)))
        metric("auth_failures", "counter", "Authentications with a wrong token (HELLO, memcached's authentication set).", Double(stats.authFailures.load(ordering: .relaxed)))
        metric("auth_delayed", "counter", "Failed authentications answered after a delay (past 5 failures from one address within a minute).", Double(stats.authDelayed.load(ordering: .relaxed)))
        metric("auth_throttled_addresses", "gauge", "Source addresses with failed authentications tracked (at most 10,000; kept a minute).", Double(authThrottle.count))
        metric("forbidden", "counter", "Requests refused because the user's role or namespaces do not allow them (FORBIDDEN).", Double(stats.forbidden.load(ordering: .relaxed)))
        metric("credentials_users", "gauge", "Users the node knows (--credentials, plus --auth-token-file's).", Double(credentials.current?.users.count ?? 0))
        metric("credentials_reloads", "counter", "Credential reloads (SIGHUP) that took effect.", Double(stats.credentialsReloads.load(ordering: .relaxed)))
        metric("credentials_reload_failures", "counter", "Credential reloads refused (bad file): the previous users stay.", Double(stats.credentialsReloadFailures.load(ordering: .relaxed)))
        metric("tls_connections", "counter", "Connections accepted on the TLS ports (binary, memcached, metrics).", Double(stats.tlsConnections.load(ordering: .relaxed)))
        metric("tls_handshake_failures", "counter", "TLS handshakes that failed (not TLS, a certificate refused, or cut by --frame-timeout).", Double(stats.tlsHandshakeFailures.load(ordering: .relaxed)))
        metric("tls_reloads", "counter", "Certificate reloads (SIGHUP) that took effect.", Double(stats.tlsReloads.load(ordering: .relaxed)))
        metric("tls_reload_failures", "counter", "Certificate reloads that failed (the old certificate stays in use).", Double(stats.tlsReloadFailures.load(ordering: .relaxed)))
        metric("disk_jobs_outstanding", "gauge", "Disk-tier jobs queued or running on workers.", Double(workers.outstanding))
        metric("memory_items", "gauge", "Items in the memory tier.", Double(s.memory.items))
        metric("memory_bytes", "gauge", "Bytes accounted by the memory tier (records and ghost queues).", Double(s.memory.bytes))
        metric("memory_hits", "counter", "Memory-tier hits.", Double(s.memory.hits))
        metric("memory_misses", "counter", "Memory-tier misses.", Double(s.memory.misses))
        metric("memory_evictions", "counter", "Items evicted from memory.", Double(s.memory.evictions))
        metric("memory_expirations", "counter", "Expired items dropped from memory.", Double(s.memory.expirations))
        metric("disk_items", "gauge", "Rows in the disk tier (tombstones included).", Double(s.disk.items))
        metric("disk_bytes", "gauge", "Bytes on disk (database file, WAL and durability log).", Double(s.disk.bytes))
        metric("disk_hits", "counter", "Disk-tier hits.", Double(s.disk.hits))
        metric("disk_misses", "counter", "Disk-tier misses.", Double(s.disk.misses))
        metric("disk_evictions", "counter", "Rows evicted from disk.", Double(s.disk.evictions))
        metric("disk_expirations", "counter", "Expired rows swept from disk.", Double(s.disk.expirations))
        metric("disk_commits", "counter", "Disk-tier transactions committed.", Double(s.commits))
        metric("disk_write_errors", "counter", "Disk writes that failed.", Double(s.diskWriteErrors))
        metric("disk_wal_copies", "counter", "WAL checkpoints copied by the checkpoint thread.", Double(s.walCopies))
        metric("disk_writer_checkpoints", "counter", "WAL checkpoints the writer did alone (copier absent or far behind).",
               Double(s.writerCheckpoints))
        metric("corrupt_items", "counter", "Items that failed their checksum.", Double(s.corruptItems))
        metric("quarantines", "counter", "Databases moved aside as corrupt.", Double(s.quarantines))
        metric("write_behind_pending", "gauge", "Write-behind writes not yet committed.", Double(s.writeBehindPending))
        metric("write_behind_pending_bytes", "gauge", "Bytes of write-behind writes not yet in the log (bounded by --max-write-behind-bytes).", Double(s.writeBehindPendingBytes))
        metric("write_behind_peak_bytes", "gauge", "The most bytes of write-behind writes not yet in the log at once since the node started.", Double(s.writeBehindPeakBytes))
        metric("write_behind", "counter", "Write-behind writes accepted.", Double(s.writeBehindTotal))
        metric("log_bytes", "gauge", "Bytes of the durability log's segment files.", Double(s.logBytes))
        metric("log_backlog_records", "gauge", "Writes in the durability log not yet applied to SQLite.", Double(s.logBacklogRecords))
        metric("log_backlog_bytes", "gauge", "Log bytes not yet applied to SQLite.", Double(s.logBacklogBytes))
        metric("log_syncs", "counter", "fdatasync calls on the durability log.", Double(s.logSyncs))
        metric("log_backpressure_waits", "counter", "Writes that waited for the applier (backlog at --log-limit).", Double(s.logBackpressureWaits))
        metric("log_write_errors", "counter", "Log records whose batch could not be written (their writers got the error).", Double(s.logWriteErrors))
        metric("log_apply_errors", "counter", "Batches SQLite refused to apply (retried).", Double(s.logApplyErrors))
        metric("log_applied_records", "counter", "Log records applied to SQLite.", Double(s.logAppliedRecords))
        metric("compression_raw_bytes", "counter", "Value bytes written to disk before compression.", Double(s.rawBytesWritten))
        metric("compression_stored_bytes", "counter", "Value bytes written to disk after compression.", Double(s.storedBytesWritten))
        metric("variants_computed", "counter", "Image variants computed.", Double(stats.variantsComputed.load()))
        metric("variant_hits", "counter", "Image variants served from the cache.", Double(stats.variantHits.load()))
        metric("variants_dropped", "counter", "Stored image variants removed because their original changed.", Double(stats.variantsDropped.load()))
        metric("image_transform_us", "counter", "Microseconds spent computing image variants.", Double(stats.transformMicros.load()))
        metric("leases_granted", "counter", "Read-through leases granted.", Double(stats.leasesGranted.load()))
        metric("leases_filling", "counter", "Lease GETs told another client is filling the key.", Double(stats.leasesFilling.load()))
        metric("leases_lost", "counter", "Fills refused because their lease had expired or was revoked.", Double(stats.leasesLost.load()))
        metric("leases_held", "gauge", "Leases currently held.", Double(dispatcher.leases.count))
        metric("negative_hits", "counter", "Negative entries (cached load failures) served.", Double(stats.negativeHits.load()))
        metric("stale_hits", "counter", "Stale (invalidated) items served.", Double(stats.staleHits.load()))
        out += "# HELP strata_images_stored_total Images stored, by format.\n# TYPE strata_images_stored_total counter\n"
        for f in ImageFormat.allCases {
            out += "strata_images_stored_total{format=\"\(f.metricName)\"} \(stats.imagesStored[Int(f.rawValue)].load())\n"
        }
        for n in clusterNumbers() { metric(n.name, n.type, n.help, Double(n.value)) }
        if let m = memcached { out += m.prometheusText() }
        out += "# HELP strata_requests_total Requests served, by operation.\n# TYPE strata_requests_total counter\n"
        for op in Opcode.allCases {
            out += "strata_requests_total{op=\"\(op.name)\"} \(stats.ops[Int(op.rawValue)].load())\n"
        }
        out += "# HELP strata_request_duration_seconds Time from a request's arrival to its answer, by operation.\n"
        out += "# TYPE strata_request_duration_seconds histogram\n"
        for op in Opcode.allCases {
            let h = stats.latency[Int(op.rawValue)]
            let buckets = h.cumulativeSeconds()
            for b in buckets { out += "strata_request_duration_seconds_bucket{op=\"\(op.name)\",le=\"\(b.le)\"} \(b.count)\n" }
            let n = h.count
            out += "strata_request_duration_seconds_bucket{op=\"\(op.name)\",le=\"+Inf\"} \(n)\n"
            out += "strata_request_duration_seconds_sum{op=\"\(op.name)\"} \(h.approximateSumSeconds)\n"
            out += "strata_request_duration_seconds_count{op=\"\(op.name)\"} \(n)\n"
        }
        out += NamespaceStats.prometheus(store: store, limit: dispatcher.namespaceStatsLimit,
                                         usage: dispatcher.namespaceUsage.usage(store))
        return out
    }
}
