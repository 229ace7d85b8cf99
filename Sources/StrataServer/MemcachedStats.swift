#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataWire

// The memcached listener's `stats` answer and its counters in /metrics and STATS.
extension MemcachedListener {
    /// memcached's general statistics, with the names clients and exporters read. Item and byte
    /// figures are the node's (the listener's tiers: disk when it writes to disk, else memory).
    func statsFields() -> [(String, String)] {
        let s = store.stats(includeNamespaces: false)
        var ru = rusage()
        getrusage(Int32(RUSAGE_SELF.rawValue), &ru)
        func secs(_ t: timeval) -> String {
            let us = String(Int(t.tv_usec))
            return "\(Int(t.tv_sec)).\(String(repeating: "0", count: max(0, 6 - us.count)))\(us)"
        }
        let c = { (name: String) in String(self.commands[MemcachedCommand.names.firstIndex(of: name)!].load()) }
        let items = memoryOnly ? s.memory.items : max(s.memory.items, s.disk.items)
        let bytes = memoryOnly ? s.memory.bytes : s.disk.bytes
        let cmdSet = ["set", "add", "replace", "append", "prepend", "cas", "ms"].reduce(0) {
            $0 + commands[MemcachedCommand.names.firstIndex(of: $1)!].load()
        }
        let gets = getHits.load() + getMisses.load()
        return [
            ("pid", String(getpid())),
            ("uptime", String(Int(monotonicSeconds() - started))),
            ("time", String(store.clock.nowSeconds())),
            ("version", Self.version),
            ("pointer_size", "64"),
            ("rusage_user", secs(ru.ru_utime)),
            ("rusage_system", secs(ru.ru_stime)),
            ("max_connections", String(maxConnections)),
            ("curr_connections", String(connectionsCurrent.load())),
            ("total_connections", String(connectionsTotal.load())),
            ("cmd_get", String(gets)),
            ("cmd_set", String(cmdSet)),
            ("cmd_flush", c("flush_all")),
            ("cmd_touch", String(touchHits.load() + touchMisses.load())),
            ("get_hits", String(getHits.load())),
            ("get_misses", String(getMisses.load())),
            ("get_expired", "0"),
            ("get_flushed", "0"),
            ("delete_misses", String(deleteMisses.load())),
            ("delete_hits", String(deleteHits.load())),
            ("incr_misses", String(incrMisses.load())),
            ("incr_hits", String(incrHits.load())),
            ("decr_misses", String(decrMisses.load())),
            ("decr_hits", String(decrHits.load())),
            ("cas_misses", String(casMisses.load())),
            ("cas_hits", String(casHits.load())),
            ("cas_badval", String(casBadval.load())),
            ("touch_hits", String(touchHits.load())),
            ("touch_misses", String(touchMisses.load())),
            ("auth_cmds", String(authCommands.load())),
            ("auth_errors", String(authErrors.load())),
            ("bytes_read", String(bytesRead.load())),
            ("bytes_written", String(bytesWritten.load())),
            ("limit_maxbytes", String(memoryLimit)),
            ("threads", String(threads)),
            ("bytes", String(bytes)),
            ("curr_items", String(items)),
            ("total_items", String(totalItems.load())),
            ("evictions", String(s.memory.evictions + s.disk.evictions)),
            ("expired_unfetched", "0"),
            ("evicted_unfetched", "0"),
            ("reclaimed", String(s.memory.expirations + s.disk.expirations)),
            ("client_errors", String(clientErrors.load())),
            ("server_errors", String(serverErrors.load())),
            ("unknown_commands", String(unknownCommands.load())),
        ]
    }

    /// The listener's counters for the node's STATS JSON (`memcached_*`).
    func jsonFields() -> [(String, String)] {
        var out: [(String, String)] = []
        if let p = port { out.append(("memcached_port", String(p))) }
        if let p = tlsPort { out.append(("memcached_tls_port", String(p))) }
        out += [
            ("memcached_connections_current", String(connectionsCurrent.load())),
            ("memcached_connections_total", String(connectionsTotal.load())),
            ("memcached_errors_unknown_command", String(unknownCommands.load())),
            ("memcached_errors_client", String(clientErrors.load())),
            ("memcached_errors_server", String(serverErrors.load())),
            ("memcached_get_hits", String(getHits.load())), ("memcached_get_misses", String(getMisses.load())),
            ("memcached_auth_errors", String(authErrors.load())),
        ]
        for (i, n) in MemcachedCommand.names.enumerated() { out.append(("memcached_cmd_\(n)", String(commands[i].load()))) }
        return out
    }

    /// The listener's counters in the Prometheus text format.
    func prometheusText() -> String {
        var out = "# HELP strata_memcached_commands_total memcached text-protocol commands, by command.\n"
        out += "# TYPE strata_memcached_commands_total counter\n"
        for (i, n) in MemcachedCommand.names.enumerated() { out += "strata_memcached_commands_total{cmd=\"\(n)\"} \(commands[i].load())\n" }
        out += "# HELP strata_memcached_errors_total memcached errors, by kind (ERROR, CLIENT_ERROR, SERVER_ERROR), answered or, for a noreply command, only counted.\n"
        out += "# TYPE strata_memcached_errors_total counter\n"
        out += "strata_memcached_errors_total{kind=\"unknown_command\"} \(unknownCommands.load())\n"
        out += "strata_memcached_errors_total{kind=\"client\"} \(clientErrors.load())\n"
        out += "strata_memcached_errors_total{kind=\"server\"} \(serverErrors.load())\n"
        out += "# HELP strata_memcached_connections_current Open memcached connections.\n# TYPE strata_memcached_connections_current gauge\n"
        out += "strata_memcached_connections_current \(connectionsCurrent.load())\n"
        out += "# HELP strata_memcached_get_hits_total memcached keys found by get/gets and mg (gat/gats count as touches).\n# TYPE strata_memcached_get_hits_total counter\n"
        out += "strata_memcached_get_hits_total \(getHits.load())\n"
        out += "# HELP strata_memcached_get_misses_total memcached keys not found by get/gets and mg (gat/gats count as touches).\n# TYPE strata_memcached_get_misses_total counter\n"
        out += "strata_memcached_get_misses_total \(getMisses.load())\n"
        // Every STATS figure is a metric (an outside review, nu3: these two were not).
        out += "# HELP strata_memcached_connections_total memcached connections accepted (both ports).\n# TYPE strata_memcached_connections_total counter\n"
        out += "strata_memcached_connections_total \(connectionsTotal.load())\n"
        out += "# HELP strata_memcached_auth_errors_total memcached authentication attempts refused.\n# TYPE strata_memcached_auth_errors_total counter\n"
        out += "strata_memcached_auth_errors_total \(authErrors.load())\n"
        return out
    }
}
