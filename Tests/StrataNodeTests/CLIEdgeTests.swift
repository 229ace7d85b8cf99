import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataImage
import StrataWire

/// What an operator or a new user meets at the edges of the CLI (each run a fresh process):
/// out-of-range numbers are usage errors (exit 2), never a crash; switches from the
/// environment are read strictly; `strata check` leaves a stopped node's directory as it was;
/// an oversized value is refused by name.
final class CLIEdgeTests: XCTestCase {
    func cli(_ node: NodeProcess, _ args: [String], stdin: [UInt8]? = nil) throws -> (code: Int32, out: String, err: String) {
        let r = try runCLI(args + ["--server", "127.0.0.1:\(node.port)"], stdin: stdin)
        return (r.code, String(decoding: r.out, as: UTF8.self), r.err)
    }

    func testDurationsOutOfRangeAreUsageErrorsNotCrashes() throws {
        // Each was accepted and then crashed the node (at its first SET) or the client.
        for args in [["--default-ttl", "1e13"], ["--lease-timeout", "1e300"], ["--idle-age", "inf"], ["--frame-timeout", "nan"]] {
            let r = try runCLI(["serve", "--port", "0", "--data", TempDir().path] + args)
            XCTAssertEqual(r.code, 2, "\(args): \(r.err)")
            XCTAssertTrue(r.err.contains(args[0]) && r.err.contains("2147483647"), r.err)
        }
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--default-ttl", "2147483647"])
        // The largest default TTL resolves without overflowing.
        XCTAssertEqual(try cli(node, ["set", "k", "v"]).code, 0)
        let meta = try cli(node, ["meta", "k"])
        XCTAssertEqual(meta.code, 0, meta.err)
        XCTAssertFalse(meta.out.contains("expires       never"), meta.out)
        for args in [["ping", "--timeout", "inf"], ["ping", "--timeout", "1e10"], ["get", "k", "--or-run", "true", "--max-wait", "1e300"],
                     ["get", "k", "--or-run", "true", "--refresh-ahead", "inf"], ["stats", "--watch", "inf"]] {
            let r = try cli(node, args)
            XCTAssertEqual(r.code, 2, "\(args): \(r.err)")
        }
        // Large but in range: the connect and read timeouts are clamped, not trapped on.
        XCTAssertEqual(try cli(node, ["ping", "--timeout", "3000000"]).code, 0)
        XCTAssertEqual(try cli(node, ["ping", "--timeout", "0"]).code, 0, "0: no limit")
        XCTAssertEqual(try cli(node, ["stats", "--watch", "1", "--json"]).code, 2, "--watch draws its own view")
        XCTAssertEqual(node.terminate(), 0, "the node is still up")
    }

    func testSwitchesFromTheEnvironmentAreReadStrictly() throws {
        let bad = try runCLI(["serve", "--port", "0", "--data", TempDir().path], env: ["STRATA_TLS_ONLY": "maybe"])
        XCTAssertEqual(bad.code, 2, bad.err)
        XCTAssertTrue(bad.err.contains("--tls-only") && bad.err.contains("maybe"), bad.err)
        let insecure = try runCLI(["serve", "--port", "0", "--data", TempDir().path], env: ["STRATA_INSECURE": "enabled"])
        XCTAssertEqual(insecure.code, 2, insecure.err)
        // A flag turns off what the environment turned on.
        let off = try NodeProcess(dataDir: TempDir().path, extra: ["--memcached-port", "0", "--memcached-memory-only=false"],
                                  env: ["STRATA_MEMCACHED_MEMORY_ONLY": "true"])
        XCTAssertFalse(off.startupLines.contains("memory only"), off.startupLines)
        let badSwitch = try runCLI(["serve", "--port", "0", "--data", TempDir().path, "--insecure=maybe"])
        XCTAssertEqual(badSwitch.code, 2, badSwitch.err)
        // "on" is true: the memcached listener says it is memory only.
        let node = try NodeProcess(dataDir: TempDir().path, extra: ["--memcached-port", "0"], env: ["STRATA_MEMCACHED_MEMORY_ONLY": "on"])
        XCTAssertNotNil(node.memcachedPort)
        XCTAssertTrue(node.startupLines.contains("memory only"), node.startupLines)
    }

    /// The config file is read by JSON type (an operator's review: `"port": true` bound port 1,
    /// `"data": true` made a directory `./1`, `"insecure": 1` turned insecure on).
    func testConfigFileValuesAreReadByTheirJSONType() throws {
        let dir = TempDir()
        func serve(_ json: String) throws -> (code: Int32, err: String) {
            let path = dir.path + "/c.json"
            try json.write(toFile: path, atomically: true, encoding: .utf8)
            let r = try runCLI(["serve", "--config", path, "--data", TempDir().path, "--port", "0"])
            return (r.code, r.err)
        }
        for (json, says) in [("{\"port\": true}", "config 'port' in '\(dir.path)/c.json' (--port) must be a string or a number"),
                             ("{\"data\": false}", "config 'data' in '\(dir.path)/c.json' (--data) must be a string or a number"),
                             ("{\"memory_limit\": true}", "config 'memory_limit' in '\(dir.path)/c.json' (--memory-limit) must be a string or a number"),
                             ("{\"insecure\": 1}", "config 'insecure' in '\(dir.path)/c.json' (--insecure) must be true or false"),
                             ("{\"tls_only\": \"true\"}", "config 'tls_only' in '\(dir.path)/c.json' (--tls-only) must be true or false"),
                             ("{\"port\": 7400", "is not a JSON object of settings"),
                             ("[1, 2]", "is not a JSON object of settings")] {
            let r = try serve(json)
            XCTAssertEqual(r.code, 2, "\(json): \(r.err)")
            XCTAssertTrue(r.err.contains(says), "\(json): \(r.err)")
        }
        // Seconds are decimal: a hexadecimal or exponent form is refused, not read as 16 s (nu4).
        for bad in ["0x10", "1e3", "+5", "1.2.3", "."] {
            let r = try runCLI(["serve", "--default-ttl", bad, "--data", TempDir().path, "--port", "0"])
            XCTAssertEqual(r.code, 2, "\(bad): \(r.err)")
            XCTAssertTrue(r.err.contains("--default-ttl must be a number of seconds"), r.err)
        }
        // A --cluster list file that cannot be read is a setting to fix: exit 2, as for other files (nu4).
        // The node's own checks name a setting from the file as written there (op7).
        try "{\"memcached_namespace\": \"x\"}".write(toFile: dir.path + "/dep.json", atomically: true, encoding: .utf8)
        let dep = try runCLI(["serve", "--config", dir.path + "/dep.json", "--data", TempDir().path, "--port", "0"])
        XCTAssertEqual(dep.code, 2, dep.err)
        XCTAssertTrue(dep.err.contains("config 'memcached_namespace' in '\(dir.path)/dep.json' (--memcached-namespace) needs --memcached-port"), dep.err)
        let noList = try runCLI(["serve", "--cluster", "file:" + dir.path + "/no-list", "--data", TempDir().path, "--port", "0"])
        XCTAssertEqual(noList.code, 2, noList.err)
        XCTAssertTrue(noList.err.contains("cannot read \(dir.path)/no-list"), noList.err)
        let missing = try runCLI(["serve", "--config", dir.path + "/none.json", "--data", TempDir().path])
        XCTAssertEqual(missing.code, 2)
        XCTAssertTrue(missing.err.contains("cannot read the config file") && missing.err.lowercased().contains("no such file"), missing.err)
        // STRATA_CONFIG names the file as --config does (an operator saw it ignored).
        try "{\"port\": true}".write(toFile: dir.path + "/bad.json", atomically: true, encoding: .utf8)
        let fromEnv = try runCLI(["serve", "--data", TempDir().path, "--port", "0"], env: ["STRATA_CONFIG": dir.path + "/bad.json"])
        XCTAssertEqual(fromEnv.code, 2, fromEnv.err)
        XCTAssertTrue(fromEnv.err.contains("config 'port' in '\(dir.path)/bad.json'"), fromEnv.err)
        // Numbers and strings both work where a value is expected.
        try "{\"max_connections\": 77, \"memory_limit\": \"64MiB\", \"insecure\": false}".write(toFile: dir.path + "/ok.json", atomically: true, encoding: .utf8)
        let node = try NodeProcess(dataDir: TempDir().path, extra: ["--config", dir.path + "/ok.json"])
        let stats = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(try node.connect().stats().utf8)) as? [String: Any])
        XCTAssertEqual(stats["max_connections"] as? Int, 77)
    }

    /// An outside review (nu1): a setting written both ways in the file took a random one of its
    /// values from start to start; a value from the environment or the file was named by the
    /// flag; malformed JSON had no place; a missing file printed a raw NSError; an option left
    /// without its value took the next option as its value; two listeners on one port looked
    /// like a busy port.
    func testSettingsAreReadDeterministicallyAndErrorsNameWhatTheOperatorWrote() throws {
        let dir = TempDir()
        func serve(_ json: String?, _ args: [String] = [], env: [String: String] = [:]) throws -> (code: Int32, err: String) {
            var a = ["serve", "--data", TempDir().path, "--port", "0"] + args
            if let json {
                try json.write(toFile: dir.path + "/c.json", atomically: true, encoding: .utf8)
                a += ["--config", dir.path + "/c.json"]
            }
            let r = try runCLI(a, env: env)
            return (r.code, r.err)
        }
        for (json, says) in [("{\"max_connections\": 100, \"max-connections\": 111}",
                              "config keys 'max-connections' and 'max_connections' in '\(dir.path)/c.json' name the same setting"),
                             ("{\"memory_limit\": \"lots\"}", "config 'memory_limit' in '\(dir.path)/c.json' (--memory-limit) must be a size"),
                             ("{\n  \"port\": 7400,\n  \"data\": x\n}", "(line 3, column 11)")] {
            let r = try serve(json)
            XCTAssertEqual(r.code, 2, "\(json): \(r.err)")
            XCTAssertTrue(r.err.contains(says), "\(json): \(r.err)")
        }
        let env = try serve(nil, env: ["STRATA_MAX_CONNECTIONS": "abc"])
        XCTAssertEqual(env.code, 2)
        XCTAssertTrue(env.err.contains("STRATA_MAX_CONNECTIONS (--max-connections) must be an integer"), env.err)
        let missing = try runCLI(["serve", "--config", dir.path + "/none.json", "--data", TempDir().path])
        XCTAssertEqual(missing.code, 2)
        XCTAssertTrue(missing.err.contains("cannot read the config file '\(dir.path)/none.json': No such file or directory") &&
                      !missing.err.contains("NSPOSIXErrorDomain"), missing.err)
        let directory = try runCLI(["serve", "--config", dir.path, "--data", TempDir().path])
        XCTAssertEqual(directory.code, 2)
        XCTAssertTrue(directory.err.contains("cannot read the config file '\(dir.path)': it is a directory") &&
                      !directory.err.contains("NSCocoaErrorDomain"), directory.err)
        let interval = try runCLI(["serve", "--sync-interval", "0", "--data", TempDir().path])
        XCTAssertTrue(interval.err.contains("--sync-interval must be 0.1…3600 seconds, got 0") && !interval.err.contains("0.0"), interval.err)
        for (args, says) in [(["--data", "--validate-images"], "--data needs a value, got the option '--validate-images'"),
                             (["--memory-limit", "--port=0"], "--memory-limit needs a value, got the option '--port=0'"),
                             (["--metrics-port", "29377", "--memcached-port", "29377"], "--memcached-port and --metrics-port are both 29377"),
                             (["--disk-limit", "2x"], "TiB")] {
            let r = try runCLI(["serve", "--port", "0"] + args + (args.first == "--data" ? [] : ["--data", TempDir().path]))
            XCTAssertEqual(r.code, 2, "\(args): \(r.err)")
            XCTAssertTrue(r.err.contains(says), "\(args): \(r.err)")
        }
        // A value that merely starts with -- (not an option) is still a value; 2TiB is a size.
        let node = try NodeProcess(dataDir: TempDir().path, extra: ["--memcached-port", "0", "--memcached-namespace", "--odd", "--disk-limit", "2tib"])
        XCTAssertTrue(node.startupLines.contains("namespace '--odd'"), node.startupLines)
    }

    /// `stats --nodes … --json` is one JSON document with the totals; the table escapes the
    /// control characters of a namespace's name (a tenant's name must not drive an admin's terminal).
    func testClusterStatsJSONIsOneDocumentAndNamesAreEscapedOnTheTerminal() throws {
        let a = try NodeProcess(dataDir: TempDir().path), b = try NodeProcess(dataDir: TempDir().path)
        let nodes = "127.0.0.1:\(a.port),127.0.0.1:\(b.port)"
        for i in 0..<20 { XCTAssertEqual(try runCLI(["set", "k\(i)", "v", "--nodes", nodes]).code, 0) }
        let r = try runCLI(["stats", "--nodes", nodes, "--json"])
        XCTAssertEqual(r.code, 0, r.err)
        let doc = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(r.out)) as? [String: Any], String(decoding: r.out, as: UTF8.self))
        XCTAssertEqual((doc["nodes"] as? [Any])?.count, 2)
        XCTAssertEqual(doc["answering"] as? Int, 2)
        let totals = try XCTUnwrap(doc["totals"] as? [String: Any])
        XCTAssertGreaterThanOrEqual(totals["disk_items"] as? Int ?? 0, 20, "\(totals)")
        XCTAssertEqual(try cli(a, ["set", "k", "v", "--ns", "tenant-\u{1B}[2Jred\nline"]).code, 0)
        let table = try cli(a, ["stats", "--by-namespace"])
        XCTAssertEqual(table.code, 0, table.err)
        XCTAssertFalse(table.out.contains("\u{1B}"), table.out)
        XCTAssertTrue(table.out.contains("tenant-\\x1b[2Jred\\x0aline"), table.out)
    }

    /// On a terminal, `get --ext` of an item with no extended data prints nothing — not even
    /// the newline a value gets there (README; an outside review saw "\r\n"). Run under
    /// `script` (bsdutils, essential in Debian) for a pseudo-terminal.
    func testExtOnATerminalPrintsNothingForAnItemWithNone() throws {
        let node = try NodeProcess(dataDir: TempDir().path)
        XCTAssertEqual(try cli(node, ["set", "plain", "v"]).code, 0)
        let strata = try XCTUnwrap(builtExecutable("strata"))
        let server = "127.0.0.1:\(node.port)"
        func onTerminal(_ args: String) throws -> String {
            let r = try runProcess("/usr/bin/script", ["-qec", "\(strata) \(args) --server \(server)", "/dev/null"])
            XCTAssertEqual(r.status, 0, r.output)
            return r.output
        }
        XCTAssertEqual(try onTerminal("get plain --ext"), "", "no extended data: nothing at all")
        XCTAssertEqual(try onTerminal("get plain"), "v\r\n", "a value on a terminal ends with a newline")
    }

    /// Settings that would make a node useless are refused at start, as their siblings are.
    func testSettingsThatWouldDisableTheNodeAreRefused() throws {
        for (args, says) in [(["--output-cap", "0"], "--output-cap must be at least 64KiB"),
                             (["--frame-timeout", "0"], "--frame-timeout must be more than 0"),
                             (["--disk-limit", "1"], "--disk-limit must be 0 (no limit) or at least 1MiB"),
                             (["--max-item", "5GiB"], "--max-item must be 1B…4294901759B"),
                             (["--advertise", "n1:7400"], "--advertise needs --cluster"),
                             (["--memcached-memory-only"], "--memcached-memory-only needs --memcached-port"),
                             (["--metrics-host", "nohost"], "--metrics-host needs --metrics-port")] {
            let r = try runCLI(["serve", "--port", "0", "--data", TempDir().path] + args)
            XCTAssertEqual(r.code, 2, "\(args): \(r.err)")
            XCTAssertTrue(r.err.contains(says), "\(args): \(r.err)")
        }
        // A token file of two lines: refused, not a token no credentials hash matches.
        let twoLines = TempDir().path + "-token"
        try Data("first\nsecond\n".utf8).write(to: URL(fileURLWithPath: twoLines))
        let r2 = try runCLI(["serve", "--port", "0", "--data", TempDir().path, "--auth-token-file", twoLines])
        XCTAssertEqual(r2.code, 2, r2.err)
        XCTAssertTrue(r2.err.contains("holds more than one line"), r2.err)
        // 0 for the disk limit is no limit: the node starts and stores.
        let node = try NodeProcess(dataDir: TempDir().path, extra: ["--disk-limit", "0"])
        XCTAssertEqual(try cli(node, ["set", "k", "v"]).code, 0)
        XCTAssertFalse(node.stderr.contains("cluster_settings_unused"), node.stderr)
    }

    /// A bad option of a client command is a usage error (exit 2) with the node down as with it
    /// up — checked before connecting, not "cannot connect" (exit 3; an outside review, nu4).
    func testBadClientOptionsAreUsageErrorsWithTheNodeDown() throws {
        let down = "127.0.0.1:\(try MemcachedClientTests.freePort())"
        for args in [["set", "k", "v", "--ttl", "-1"], ["set", "k", "v", "--flags", "4294967296"], ["get", "k", "--tiers", "foo"],
                     ["incr", "k", "abc"], ["set", "k", "v", "--mode", "sometimes"],
                     // nu5: the rest were "cannot connect" (exit 3) with the node down.
                     ["keys", "--limit", "-1"], ["keys", "--limit", "0"], ["stats", "--ns", "a", "--by-namespace"],
                     ["stats", "--watch", "0"], ["stats", "--watch", "-1"], ["flush"], ["flush", "--ns", "a", "--all"],
                     ["touch", "k"], ["incr", "k", "1", "--initial", "x"], ["set", "k", "v", "--ext-file", "/nonexistent/ext"],
                     ["variant", "k", "--width", "0", "--height", "10"], ["variant", "k", "--width", "abc"],
                     ["variant", "k", "--fit", "bogus", "--width", "10", "--height", "10"],
                     // ver31: a bad KEY too.
                     ["set", "", "v"], ["get", String(repeating: "a", count: 1025)], ["del", ""], ["meta", ""],
                     ["incr", String(repeating: "b", count: 1025)]] {
            let r = try runCLI(args + ["--server", down])
            XCTAssertEqual(r.code, 2, "\(args): \(r.err)")
        }
        XCTAssertEqual(try runCLI(["get", "k", "--server", down, "--timeout", "1"]).code, 3, "a good command with the node down")
    }

    /// `strata serve`'s exit codes as README "The node" lists them: 3 for a port in use, 2 for
    /// a data directory another node holds (an outside review, nu5: listed nowhere).
    func testServeExitCodesAreTheDocumentedOnes() throws {
        let node = try NodeProcess(dataDir: TempDir().path)
        let inUse = try runCLI(["serve", "--port", String(node.port), "--data", TempDir().path])
        XCTAssertEqual(inUse.code, 3, inUse.err)
        XCTAssertTrue(inUse.err.contains("cannot listen"), inUse.err)
        let held = try runCLI(["serve", "--port", "0", "--data", node.dataDir])
        XCTAssertEqual(held.code, 2, held.err)
        XCTAssertTrue(held.err.contains("--data: "), "the flag is named, not the store's code: \(held.err)")
        let empty = try runCLI(["serve", "--port", "0", "--data", ""])
        XCTAssertEqual(empty.code, 2, empty.err)
        XCTAssertFalse(empty.err.contains("data_directory"), empty.err)
        let decode = try runCLI(["serve", "--port", "0", "--data", TempDir().path, "--image-decode-limit", "0"])
        XCTAssertEqual(decode.code, 2, decode.err)
        XCTAssertTrue(decode.err.contains("got '0'"), decode.err)
        let readme = try String(contentsOf: DeployFileTests.root.appendingPathComponent("README.md"), encoding: .utf8)
        XCTAssertTrue(readme.contains("`strata serve` exits 0 after SIGTERM"), "README lists serve's exit codes")
    }

    /// Cluster settings on a node without `--cluster` start it, with one warning naming them
    /// (an operator's review: an empty `cluster` in a config file left `replicas: 3` without effect, silently).
    func testClusterSettingsWithoutAClusterAreNamedInAWarning() throws {
        let node = try NodeProcess(dataDir: TempDir().path, extra: ["--replicas", "3", "--sync-interval", "5"])
        XCTAssertEqual(try cli(node, ["set", "k", "v"]).code, 0)
        let line = node.stderr.split(separator: "\n").first { $0.contains("event=cluster_settings_unused") }
        XCTAssertNotNil(line, node.stderr)
        XCTAssertTrue(line?.contains("--replicas,--sync-interval") == true, String(line ?? ""))
    }

    func testCheckLeavesAStoppedNodesDirectoryAsItWas() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        for i in 0..<5 { XCTAssertEqual(try cli(node, ["set", "k\(i)", "v"]).code, 0) }
        XCTAssertEqual(node.terminate(), 0)
        let before = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        XCTAssertFalse(before.contains("strata.db-wal"), "a clean stop leaves no WAL: \(before)")
        let check = try runCLI(["check", "--data", dir.path])
        XCTAssertEqual(check.code, 0, check.err)
        XCTAssertTrue(String(decoding: check.out, as: UTF8.self).contains("live items    5"), String(decoding: check.out, as: UTF8.self))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted(), before, "check created nothing there")
    }

    func testAValueOverTheFrameLimitIsRefusedAsTooLarge() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--max-item", "1MiB"])
        // Past --max-item + 64 KiB the node refuses the frame from its header and closes while
        // the client is still sending: the client reports the node's answer, not a broken send.
        let r = try cli(node, ["set", "huge"], stdin: [UInt8](repeating: 7, count: 4 << 20))
        XCTAssertEqual(r.code, 3, r.err)
        XCTAssertTrue(r.err.contains("TOO_LARGE"), r.err)
        XCTAssertEqual(try cli(node, ["get", "huge"]).code, 1, "nothing was stored")
    }

    func testMetaPrintsAnImagesFacts() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let pixels: [UInt8] = (0..<(20 * 10)).flatMap { [UInt8($0 % 251), 40, 90, 255] }
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: pixels, width: 20, height: 10))
        XCTAssertEqual(try cli(node, ["set", "p.png"], stdin: png).code, 0)
        let meta = try cli(node, ["meta", "p.png"])
        XCTAssertEqual(meta.code, 0, meta.err)
        XCTAssertTrue(meta.out.hasSuffix("image         png 20×10, alpha\n") || meta.out.hasSuffix("image         png 20×10\n"), meta.out)
        XCTAssertFalse(try cli(node, ["meta", "p.png"]).out.isEmpty)
        XCTAssertEqual(try cli(node, ["set", "t", "text"]).code, 0)
        XCTAssertFalse(try cli(node, ["meta", "t"]).out.contains("image"), "not an image: no image line")
        // META reads the value's headers without counting a hit (§7.13.1).
        let c = try node.connect()
        let before = try nodeStats(c)
        for _ in 0..<3 { XCTAssertEqual(try cli(node, ["meta", "p.png"]).code, 0) }
        let after = try nodeStats(c)
        for k in ["memory_hits", "disk_hits", "memory_misses", "disk_misses"] {
            XCTAssertEqual(after[k] as? Int, before[k] as? Int, k)
        }
        // A negative entry (a cached load failure) is no image: not found for image commands.
        var neg = SetRequest(key: b("n.png"), value: png)
        neg.negative = true
        XCTAssertEqual(try c.set(neg).statusCode, .ok)
        XCTAssertEqual(try c.call(.imageInfo(namespace: [], key: b("n.png"))).statusCode, .notFound)
        XCTAssertEqual(try c.call(.imageVariant(VariantRequest(key: b("n.png"), maxWidth: 8, maxHeight: 8))).statusCode, .notFound)
        // get --ttl alone would do nothing: refused.
        let ttl = try cli(node, ["get", "t", "--ttl", "5"])
        XCTAssertEqual(ttl.code, 2, ttl.err)
        XCTAssertTrue(ttl.err.contains("touch"), ttl.err)
    }

    func testQuitIsAnsweredBeforeAuthentication() throws {
        let dir = TempDir()
        try Data("s3cret\n".utf8).write(to: URL(fileURLWithPath: dir.path + "/token"))
        let node = try NodeProcess(dataDir: dir.path + "/data", extra: ["--auth-token-file", dir.path + "/token"])
        let c = try NodeConnection(host: "127.0.0.1", port: node.port, timeout: 5)
        XCTAssertEqual(try c.call(.get(GetRequest(key: b("k")))).statusCode, .authRequired)
        let empty = try NodeConnection(host: "127.0.0.1", port: node.port, timeout: 5)
        let refused = try empty.call(.hello(minVersion: 1, maxVersion: 1, token: []))
        XCTAssertEqual(refused.statusCode, .authFailed)
        XCTAssertTrue(String(decoding: refused.value, as: UTF8.self).hasPrefix("no token given"), String(decoding: refused.value, as: UTF8.self))
        XCTAssertEqual(try c.call(.quit).statusCode, .ok, "an unauthenticated client may close politely")
        XCTAssertThrowsError(try c.readFrame(), "the node closed the connection")
    }

    func testKeysLimitHoldsWithNodesToo() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        for i in 0..<12 { XCTAssertEqual(try cli(node, ["set", "k\(i)", "v"]).code, 0) }
        let one = try runCLI(["keys", "--limit", "5", "--nodes", "127.0.0.1:\(node.port)"])
        XCTAssertEqual(one.code, 0, one.err)
        XCTAssertEqual(String(decoding: one.out, as: UTF8.self).split(separator: "\n").count, 5)
        XCTAssertEqual(try cli(node, ["keys", "--limit", "5"]).out.split(separator: "\n").count, 5)
    }

    /// Outside review nu2: bytes that are not UTF-8 in an argument were replaced by U+FFFD, so
    /// two namespaces became one; such an argument is refused (exit 2).
    func testAnArgumentThatIsNotUTF8IsRefused() throws {
        let node = try NodeProcess(dataDir: TempDir().path)
        let strata = try XCTUnwrap(builtExecutable("strata"))
        let r = try runProcess("/bin/sh", ["-c", "\"$0\" set k v --ns \"$(printf 'bad\\377')\" --server 127.0.0.1:\(node.port) 2>&1; echo \"rc=$?\"", strata])
        XCTAssertTrue(r.output.contains("rc=2"), r.output)
        XCTAssertTrue(r.output.contains("not valid UTF-8"), r.output)
        XCTAssertTrue(r.output.contains("'bad\\xFF'"), "the bytes as given: \(r.output)")
    }

    /// Outside review ver4 (nu2 F8): `set` read all of stdin before a node with a 1 MiB
    /// --max-item refused it; it now asks the node's limit (STATS `max_item_bytes`) first and
    /// stops reading there.
    func testSetStopsReadingStdinAtTheNodesMaxItem() throws {
        let node = try NodeProcess(dataDir: TempDir().path, extra: ["--max-item", "1MiB"])
        XCTAssertEqual(try nodeStats(node.connect())["max_item_bytes"] as? Int, 1 << 20)
        XCTAssertEqual(try cli(node, ["set", "k", "old"]).code, 0)
        let strata = try XCTUnwrap(builtExecutable("strata"))
        // 300 MB of zeros: refused after about 1 MiB of it is read.
        let r = try runProcess("/bin/sh", ["-c", "head -c 300000000 /dev/zero | \"$0\" set k --server 127.0.0.1:\(node.port) 2>&1; echo \"rc=$?\"", strata])
        XCTAssertTrue(r.output.contains("rc=3"), r.output)
        XCTAssertTrue(r.output.contains("larger than the node's --max-item (1048576 bytes)"), r.output)
        XCTAssertEqual(try cli(node, ["get", "k"]).out, "old")
    }

    /// Outside review nu2: `stats --watch` kept drawing zeros after its node went away; it now
    /// ends with exit 3 and the error.
    func testStatsWatchEndsWhenTheNodeGoesAway() throws {
        let node = try NodeProcess(dataDir: TempDir().path)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try XCTUnwrap(builtExecutable("strata")))
        p.arguments = ["stats", "--watch", "0.2", "--count", "100", "--server", "127.0.0.1:\(node.port)"]
        let err = Pipe()
        p.standardOutput = FileHandle.nullDevice
        p.standardError = err
        try p.run()
        usleep(600_000)
        XCTAssertTrue(p.isRunning)
        XCTAssertEqual(node.terminate(), 0)
        XCTAssertTrue(eventually(10) { !p.isRunning }, "the watch went on after its node stopped")
        if p.isRunning { p.terminate() }
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 3)
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertFalse(text.isEmpty, "the error is printed")
    }

    /// Outside review nu2: `keys --nodes` failed outright with one node of three down, though
    /// every key has a copy elsewhere; it lists them all while fewer than --replicas are down.
    /// And `image-info --help` offers --nodes, which it takes (img1; it was refused then).
    func testKeysWithNodesListsEveryKeyWithOneNodeDown() throws {
        let nodes = try (0..<3).map { _ in try NodeProcess(dataDir: TempDir().path) }
        let list = nodes.map { "127.0.0.1:\($0.port)" }.joined(separator: ",")
        for i in 0..<30 { XCTAssertEqual(try runCLI(["set", "k\(i)", "v", "--nodes", list]).code, 0) }
        XCTAssertEqual(nodes[1].terminate(), 0)
        let r = try runCLI(["keys", "--nodes", list])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertEqual(Set(String(decoding: r.out, as: UTF8.self).split(separator: "\n").map(String.init)), Set((0..<30).map { "k\($0)" }))
        XCTAssertTrue(r.err.contains("127.0.0.1:\(nodes[1].port) did not answer"), r.err)
        XCTAssertEqual(nodes[2].terminate(), 0)
        XCTAssertEqual(try runCLI(["keys", "--nodes", list]).code, 3, "two of three down with 2 copies: some keys are out of reach")
        let help = try runCLI(["image-info", "--help"])
        XCTAssertTrue(String(decoding: help.out, as: UTF8.self).contains("--nodes"))
        XCTAssertTrue(String(decoding: try runCLI(["get", "--help"]).out, as: UTF8.self).contains("--nodes"))
    }

    /// Outside review nu2: `stats --by-namespace` cut long names into the numbers, shifted rows
    /// of non-ASCII names and left a quote inside a name unescaped.
    func testTheNamespaceTableFitsLongAndQuotedNames() throws {
        let node = try NodeProcess(dataDir: TempDir().path)
        let long = String(repeating: "n", count: 64), quoted = "has\"quote", wide = "größe"
        for ns in [long, quoted, wide] { XCTAssertEqual(try cli(node, ["set", "k", "v", "--ns", ns]).code, 0) }
        let table = try cli(node, ["stats", "--by-namespace"])
        XCTAssertEqual(table.code, 0, table.err)
        let lines = table.out.split(separator: "\n").map(String.init)
        let row = try XCTUnwrap(lines.first { $0.contains(long) }, table.out)
        XCTAssertTrue(row.hasPrefix("\"\(long)\" "), row)
        XCTAssertTrue(lines.contains { $0.contains("\"has\\\"quote\"") }, table.out)
        // The numbers start in the same column on every row.
        let columns = lines.filter { $0.hasPrefix("\"") }.map { $0.distance(from: $0.startIndex, to: $0.firstIndex(of: "1")!) }
        XCTAssertEqual(Set(columns).count, 1, table.out)
    }
}
