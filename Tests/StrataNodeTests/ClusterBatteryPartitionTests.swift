import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// Three network namespaces on one bridge (10.232.0.0/24; this namespace is .1, node i is
/// .(i+2)), made and removed by the test, so the nodes reach each other and can be cut off.
final class BridgedHosts {
    let tag = String(getpid() % 100_000)
    var bridge: String { "stbr\(tag)" }
    func namespace(_ i: Int) -> String { "strata-b\(tag)-\(i)" }
    func hostSide(_ i: Int) -> String { "stbh\(tag)\(i)" }
    func nsSide(_ i: Int) -> String { "stbn\(tag)\(i)" }
    func address(_ i: Int) -> String { "10.232.0.\(i + 2)" }
    private var made = 0
    private var bridgeMade = false

    /// Throws XCTSkip when namespaces cannot be made here (not root, no iproute2).
    func make(_ count: Int) throws {
        let probe = "strata-bprobe-\(tag)"
        let p = sh(["ip", "netns", "add", probe])
        guard p.status == 0 else {
            throw XCTSkip("needs root and iproute2 to make network namespaces (ip said: \(p.output.trimmingCharacters(in: .whitespacesAndNewlines)))")
        }
        sh(["ip", "netns", "del", probe])
        for cmd in [["ip", "link", "add", bridge, "type", "bridge"], ["ip", "addr", "add", "10.232.0.1/24", "dev", bridge],
                    ["ip", "link", "set", bridge, "up"]] {
            let r = sh(cmd)
            if r.status != 0 { throw XCTSkip("could not make a bridge: \(cmd.joined(separator: " ")): \(r.output)") }
            bridgeMade = true
        }
        for i in 0..<count {
            made = i + 1
            for cmd in [["ip", "netns", "add", namespace(i)],
                        ["ip", "link", "add", hostSide(i), "type", "veth", "peer", "name", nsSide(i)],
                        ["ip", "link", "set", nsSide(i), "netns", namespace(i)],
                        ["ip", "link", "set", hostSide(i), "master", bridge],
                        ["ip", "link", "set", hostSide(i), "up"],
                        ["ip", "netns", "exec", namespace(i), "ip", "addr", "add", "\(address(i))/24", "dev", nsSide(i)],
                        ["ip", "netns", "exec", namespace(i), "ip", "link", "set", nsSide(i), "up"],
                        ["ip", "netns", "exec", namespace(i), "ip", "link", "set", "lo", "up"]] {
                let r = sh(cmd)
                if r.status != 0 { throw XCTSkip("could not set up the namespaces: \(cmd.joined(separator: " ")): \(r.output)") }
            }
        }
    }

    /// Cuts (or restores) node i's link from its side: packets are silently lost.
    func setLink(_ i: Int, up: Bool) -> Bool {
        sh(["ip", "netns", "exec", namespace(i), "ip", "link", "set", nsSide(i), up ? "up" : "down"]).status == 0
    }

    func remove() {
        for i in 0..<made {
            sh(["ip", "netns", "del", namespace(i)])
            sh(["ip", "link", "del", hostSide(i)])
        }
        if bridgeMade { sh(["ip", "link", "del", bridge]) }
        made = 0
        bridgeMade = false
    }
}

extension ClusterBatteryTests {
    /// A 10 s (3 s in `make test`) partition of one node: its link is cut while keys change,
    /// then restored.
    func testAPartitionOfOneNode() throws {
        for (r, ack) in batteryCombinations((2, .one)) {
            let net = BridgedHosts()
            defer { net.remove() }
            try net.make(3)
            let ip = sh(["sh", "-c", "command -v ip"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
            let c = BatteryCluster(hosts: all.map(net.address), ports: [7400, 7400, 7400],
                                   launchers: all.map { [ip, "netns", "exec", net.namespace($0)] }, replicas: r)
            defer { for i in all { c.kill(i) } }
            for i in all { try c.start(i, members: all) }
            let model = BatteryModel()
            try preload(c, model, members: all)
            XCTAssertTrue(net.setLink(1, up: false))
            let cut = monotonicSeconds()
            try mutate(c, model, members: all, ack: ack, tag: "cut", timeout: 0.5)
            c.readAll(model, sample(model.keys, 6), members: all, phase: "during the cut")
            let left = Self.faultSeconds - (monotonicSeconds() - cut)
            if left > 0 { Thread.sleep(forTimeInterval: left) }
            let cutFor = monotonicSeconds() - cut
            XCTAssertTrue(net.setLink(1, up: true))
            let healed = monotonicSeconds()
            // Right after the link comes back the neighbour entry may still be failed.
            _ = eventually(15, interval: 0.1) { (try? c.connect(1, timeout: 1)) != nil }
            let conv = afterHeal(c, model, members: all, healed: healed)
            reportBattery("partition", r, ack, model, converged: conv, keys: model.keys.count, cluster: c, note: String(format: "; cut %.1f s", cutFor))
            assertClean(model, conv)
        }
    }
}
