#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire
import StrataImage

/// The metrics endpoint: a small HTTP/1.1 responder on its own thread serving `/metrics`
/// (Prometheus text format 0.0.4) and `/healthz` (200 while serving, 503 while draining).
/// Anything else gets 404 (unknown path) or 405 (not GET); requests are capped at 8 KiB and
/// must arrive within 5 s; one connection at a time, closed after each answer.
final class MetricsServer: @unchecked Sendable {
    unowned let node: Node
    let fd: Int32
    let port: UInt16
    private let stopFlag = Counter()

    init(node: Node, host: String, port: UInt16) throws {
        self.node = node
        guard let a = SocketAddress(host: host, port: port) else { throw NodeError(exitCode: 2, "bad metrics address") }
        do { (fd, self.port) = try Socket.listen(a, backlog: 64) } catch {
            throw NodeError(exitCode: 3, "cannot listen for metrics on \(a): \(error)")
        }
        startThread(name: "strata-metrics") { [self] in loop() }
    }

    func stop() { stopFlag.add() }

    private func loop() {
        while stopFlag.load() == 0 {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 200) > 0 else { continue }
            guard let c = try? Sys.accept(fd) else { continue }
            serve(c)
            Sys.close(c)
        }
        Sys.close(fd)
    }

    private func serve(_ c: Int32) {
        var request: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        let deadline = monotonicSeconds() + 5
        while !request.containsHeaderEnd {
            if request.count > 8192 { return respond(c, 431, "text/plain", "request header too large\n") }
            let left = deadline - monotonicSeconds()
            if left <= 0 { return }
            var p = pollfd(fd: c, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, Int32(left * 1000)) > 0 else { return }
            guard let r = try? chunk.withUnsafeMutableBytes({ try Sys.read(c, $0.baseAddress!, $0.count) }),
                  case .done(let n) = r, n > 0 else { return }
            request += chunk[0..<n]
        }
        let line = String(decoding: request.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = line.split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else { return respond(c, 400, "text/plain", "bad request\n") }
        let path = parts[1].split(separator: "?").first.map(String.init) ?? ""
        guard path == "/metrics" || path == "/healthz" else { return respond(c, 404, "text/plain", "not found\n") }
        guard parts[0] == "GET" || parts[0] == "HEAD" else { return respond(c, 405, "text/plain", "method not allowed\n", allow: true) }
        if path == "/healthz" {
            return node.draining ? respond(c, 503, "text/plain", "draining\n") : respond(c, 200, "text/plain", "ok\n")
        }
        respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", node.prometheusText(), head: parts[0] == "HEAD")
    }

    private func respond(_ c: Int32, _ code: Int, _ type: String, _ body: String, allow: Bool = false, head: Bool = false) {
        let reason = [200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                      431: "Request Header Fields Too Large", 503: "Service Unavailable"][code] ?? "Error"
        var text = "HTTP/1.1 \(code) \(reason)\r\nContent-Type: \(type)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n"
        if allow { text += "Allow: GET, HEAD\r\n" }
        text += "\r\n"
        if !head { text += body }
        let bytes = Array(text.utf8)
        var sent = 0
        let deadline = monotonicSeconds() + 5
        while sent < bytes.count && monotonicSeconds() < deadline {
            guard let r = try? bytes.withUnsafeBytes({ try Sys.send(c, $0.baseAddress! + sent, bytes.count - sent) }) else { return }
            if case .done(let n) = r { sent += n } else { usleep(1000) }
        }
    }
}

extension Array where Element == UInt8 {
    var containsHeaderEnd: Bool {
        guard count >= 4 else { return false }
        for i in 0...(count - 4) where self[i] == 13 && self[i + 1] == 10 && self[i + 2] == 13 && self[i + 3] == 10 { return true }
        return false
    }
}

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
        metric("connections_refused", "counter", "Connections refused over the limit or while draining.", Double(stats.connectionsRefused.load(ordering: .relaxed)))
        metric("bytes_in", "counter", "Bytes read from clients.", Double(stats.bytesIn.load(ordering: .relaxed)))
        metric("bytes_out", "counter", "Bytes written to clients.", Double(stats.bytesOut.load(ordering: .relaxed)))
        metric("buffered_bytes", "gauge", "Bytes buffered for all connections (input and output).", Double(stats.bufferedBytes.load(ordering: .relaxed)))
        metric("busy_refusals", "counter", "Requests answered BUSY.", Double(stats.busyRefusals.load(ordering: .relaxed)))
        metric("output_bytes", "gauge", "Unsent response bytes across connections (bounded by --max-output-bytes).", Double(outputBudget.bytes))
        metric("output_held_requests", "counter", "Requests held back while unsent output was over --max-output-bytes.", Double(outputBudget.heldRequests.load(ordering: .relaxed)))
        metric("malformed_frames", "counter", "Frames refused as malformed or too large.", Double(stats.malformedFrames.load(ordering: .relaxed)))
        metric("output_cap_cutoffs", "counter", "Connections cut off for not reading their answers.", Double(stats.outputCapCutoffs.load(ordering: .relaxed)))
        metric("timeouts", "counter", "Connections closed by the frame, idle or output timeouts.", Double(stats.timeouts.load(ordering: .relaxed)))
        metric("auth_failures", "counter", "HELLOs with a wrong token.", Double(stats.authFailures.load(ordering: .relaxed)))
        metric("disk_jobs_outstanding", "gauge", "Disk-tier jobs queued or running on workers.", Double(workers.outstanding))
        metric("memory_items", "gauge", "Items in the memory tier.", Double(s.memory.items))
        metric("memory_bytes", "gauge", "Bytes accounted by the memory tier.", Double(s.memory.bytes))
        metric("memory_hits", "counter", "Memory-tier hits.", Double(s.memory.hits))
        metric("memory_misses", "counter", "Memory-tier misses.", Double(s.memory.misses))
        metric("memory_evictions", "counter", "Items evicted from memory.", Double(s.memory.evictions))
        metric("memory_expirations", "counter", "Expired items dropped from memory.", Double(s.memory.expirations))
        metric("disk_items", "gauge", "Rows in the disk tier (tombstones included).", Double(s.disk.items))
        metric("disk_bytes", "gauge", "Bytes on disk (database file and WAL).", Double(s.disk.bytes))
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
        return out
    }
}
