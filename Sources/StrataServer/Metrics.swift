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
        var out = ""
        // Text format 0.0.4: the HELP/TYPE lines name the metric exactly as its samples do
        // (counters end in _total).
        func metric(_ name: String, _ type: String, _ help: String, _ value: Double) {
            let full = "strata_\(name)\(type == "counter" ? "_total" : "")"
            out += "# HELP \(full) \(help)\n# TYPE \(full) \(type)\n\(full) \(format(value))\n"
        }
        func format(_ v: Double) -> String { v == v.rounded() && abs(v) < 1e15 ? String(Int64(v)) : String(v) }
        out += "# HELP strata_build_info The node's version.\n# TYPE strata_build_info gauge\nstrata_build_info{version=\"\(Node.version)\"} 1\n"
        for n in numbers() { metric(n.metric, n.kind.rawValue, n.help, n.value) }
        out += "# HELP strata_images_stored_total Images stored, by format.\n# TYPE strata_images_stored_total counter\n"
        for f in ImageFormat.allCases {
            out += "strata_images_stored_total{format=\"\(f.metricName)\"} \(stats.imagesStored[Int(f.rawValue)].load())\n"
        }
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
