import Foundation
import XCTest
import StrataClient
import StrataWire

/// `/metrics` parsed by the official Prometheus Python client's parser (from the .venv that
/// `make test` sets up), `/healthz`, and the responder's refusals.
final class MetricsTests: XCTestCase {
    static let python = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent(".venv/bin/python3").path

    func runPython(_ script: String, args: [String] = []) throws -> (Int32, String) {
        try runProcess(Self.python, ["-c", script] + args)
    }

    func testMetricsParseWithThePrometheusClientAndHealthzAnswers() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.python),
              (try? runPython("import prometheus_client"))?.0 == 0 else {
            throw XCTSkip("no .venv with prometheus-client (make test sets it up; it needs PyPI)")
        }
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--metrics-port", "0"])
        let c = try node.connect()
        for i in 0..<20 { try c.set(SetRequest(key: b("k\(i)"), value: b("v"))) }
        for i in 0..<30 { _ = try c.get(b("k\(i)")) }
        let port = try XCTUnwrap(node.metricsPort)
        let script = """
        import urllib.request, urllib.error, sys
        from prometheus_client.parser import text_string_to_metric_families
        base = "http://127.0.0.1:\(port)"
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        for f in fams.values():
            assert f.type != "unknown", "metric without a matching TYPE: " + f.name
        req = fams.get("strata_requests") or fams["strata_requests_total"]  # newer clients drop _total
        assert req.type == "counter", req.type
        sets = [s.value for s in req.samples if s.labels.get("op") == "set" and s.name == "strata_requests_total"]
        assert sets == [20.0], sets
        h = fams["strata_request_duration_seconds"]
        assert h.type == "histogram"
        count = [s.value for s in h.samples if s.name.endswith("_count") and s.labels["op"] == "get"]
        assert count == [30.0], count
        assert fams["strata_memory_items"].type == "gauge"
        assert urllib.request.urlopen(base + "/healthz", timeout=5).status == 200
        for path, method, want in [("/nope", "GET", 404), ("/metrics", "POST", 405)]:
            try:
                urllib.request.urlopen(urllib.request.Request(base + path, method=method), timeout=5)
                sys.exit("expected %d for %s %s" % (want, method, path))
            except urllib.error.HTTPError as e:
                assert e.code == want, (path, e.code)
        # Every figure STATS reports is a metric too (ops_* and latency_* as the labelled families).
        import socket, struct, json
        names = set(s.name for f in fams.values() for s in f.samples)
        stats_json = json.loads(sys.argv[1])
        for k in stats_json:
            # Strings (version, node_id) are identities, not figures.
            if isinstance(stats_json[k], str) or k.startswith("ops_") or k.startswith("latency_") or k.startswith("images_stored_") or k in ("uptime_s", "write_behind_total"):
                continue
            assert ("strata_" + k) in names or ("strata_" + k + "_total") in names, "STATS figure without a metric: " + k
        assert "strata_write_behind_total" in names and "strata_uptime_seconds" in names
        print("ok", len(fams))
        """
        let (code, out) = try runPython(script, args: [try c.stats()])
        XCTAssertEqual(code, 0, out)
        XCTAssertTrue(out.hasPrefix("ok"), out)
    }

    /// Every metric family a node exports is named in docs/OPERATING.md or README, or is a
    /// STATS figure of PROTOCOL.md §7.13 by the rule OPERATING.md gives (`strata_<name>`, with
    /// `_total` for a counter) — an outside review found `strata_build_info` and
    /// `strata_uptime_seconds` nowhere.
    func testEveryMetricIsDocumented() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--metrics-port", "0", "--memcached-port", "0"])
        let c = try node.connect()
        try c.set(SetRequest(key: b("k"), value: b("v")))
        _ = try c.get(b("k"))
        let reply = httpGet("127.0.0.1", try XCTUnwrap(node.metricsPort), "/metrics").reply
        let families = reply.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { String($0.split(separator: " ")[2]) }
        XCTAssertGreaterThan(families.count, 50)
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let docs = try String(contentsOf: root.appendingPathComponent("docs/OPERATING.md"), encoding: .utf8)
            + String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let stats = try String(contentsOf: root.appendingPathComponent("proto-spec/PROTOCOL.md"), encoding: .utf8)
            + String(contentsOf: root.appendingPathComponent("proto-spec/MEMCACHED.md"), encoding: .utf8)
        XCTAssertTrue(docs.contains("`strata_<name>`"), "OPERATING.md states the rule")
        func statsName(_ family: String) -> String {
            var n = family.dropFirst("strata_".count)
            if n.hasSuffix("_total") { n = n.dropLast("_total".count) }
            return "`" + n + "`"
        }
        let missing = families.filter { !docs.contains($0) && !stats.contains(statsName($0)) && !stats.contains("`" + $0.dropFirst("strata_".count) + "`") }
        XCTAssertEqual(missing, [], "metrics named nowhere in docs/OPERATING.md or README.md")
    }
}
