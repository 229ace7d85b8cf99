import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataStore
import StrataWire

/// Issue 16, "A full disk is recoverable": a node whose own data fills a real 16 MiB tmpfs.
/// New data gets DISK_FULL at the free-space floor, while deletes and flushes still run in the
/// room it keeps, and each way back — deleting half, flushing, restarting — takes writes again.
final class FullDiskTests: XCTestCase {
    /// A 16 MiB tmpfs for the data directory, unmounted at the end.
    private func smallDisk() throws -> (path: String, cleanup: () -> Void) {
        let mnt = TempDir()
        let mounted = sh(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt.path])
        guard mounted.status == 0 else {
            throw XCTSkip("needs privileges to mount a tmpfs (mount said: \(mounted.output.trimmingCharacters(in: .whitespacesAndNewlines)))")
        }
        return (mnt.path + "/data", { _ = sh(["umount", "-l", mnt.path]); _ = mnt })
    }

    private struct Filled { var acked: [([UInt8], [UInt8])] = []; var refusal: Status? }

    private var rng = SplitMix(seed: 16)
    private func value(_ n: Int = 64 << 10) -> [UInt8] {
        (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) } // incompressible
    }

    /// 64 KiB sets until the first refusal.
    private func fill(_ c: NodeConnection) throws -> Filled {
        var f = Filled()
        var rng = SplitMix(seed: 7)
        for i in 0..<600 {
            let k = b("big-\(i)"), v = (0..<(64 << 10)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            let r = try c.set(SetRequest(key: k, value: v))
            if r.statusCode == .ok { f.acked.append((k, v)) } else { f.refusal = r.statusCode; break }
        }
        XCTAssertEqual(f.refusal, .diskFull, "a full filesystem answers DISK_FULL")
        XCTAssertGreaterThan(f.acked.count, 50, "most of the 16 MiB held data before the refusal")
        return f
    }

    /// On a file system smaller than the disk limit, the largest item is sized from the file
    /// system, and TOO_LARGE says so (an outside review was told "the disk limit of 4294967296
    /// bytes holds items of at most 499712" on a small tmpfs).
    func testTooLargeNamesTheFileSystemWhenItSizedTheLargestItem() throws {
        let (data, cleanup) = try smallDisk()
        defer { cleanup() }
        let node = try NodeProcess(dataDir: data)
        let f = try node.connect().set(SetRequest(key: b("big"), value: value(1 << 20)))
        XCTAssertEqual(f.statusCode, .tooLarge)
        let message = String(decoding: f.value, as: UTF8.self)
        XCTAssertTrue(message.contains("the file system of the data directory"), message)
        XCTAssertFalse(message.contains("4294967296"), message)
    }

    private func setEventually(_ c: NodeConnection, _ key: String, _ value: [UInt8]) throws -> Bool {
        try eventually(15, interval: 0.1) { try c.set(SetRequest(key: b(key), value: value)).statusCode == .ok }
    }

    private func delete(_ c: NodeConnection, _ key: [UInt8]) throws -> Status? {
        try c.call(.delete(namespace: [], key: key, tiers: 0, version: nil, writeBehind: false)).statusCode
    }

    func testFillDeleteHalfWriteAgain() throws {
        let (data, cleanup) = try smallDisk()
        defer { cleanup() }
        let node = try NodeProcess(dataDir: data)
        let c = try node.connect()
        let f = try fill(c)
        let half = f.acked.count / 2
        for (k, _) in f.acked.prefix(half) { XCTAssertEqual(try delete(c, k), .ok, "deletes run on a full disk") }
        XCTAssertTrue(try setEventually(c, "after", value(100)), "a small write once space exists")
        // Half of the data's room is back: more big writes than a few go in.
        var again = 0
        var rng = SplitMix(seed: 99)
        for i in 0..<(half / 2) {
            let v = (0..<(64 << 10)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if try setEventually(c, "again-\(i)", v) { again += 1 } else { break }
        }
        XCTAssertEqual(again, half / 2, "a quarter of the filled data written again after deleting half")
        reportFigure("full disk, delete half (16 MiB tmpfs)", "\(f.acked.count) × 64 KiB acknowledged, then DISK_FULL; \(half) deletes OK; \(again) × 64 KiB written again")
        for (k, v) in f.acked.dropFirst(half) { XCTAssertEqual(try c.get(k, tiers: 2)?.value, v) }
        XCTAssertEqual(node.terminate(), 0)
        let check = try runCLI(["check", "--data", data])
        XCTAssertEqual(check.code, 0, String(decoding: check.out, as: UTF8.self) + check.err)
    }

    func testFillFlushWriteAgain() throws {
        let (data, cleanup) = try smallDisk()
        defer { cleanup() }
        let node = try NodeProcess(dataDir: data)
        let c = try node.connect()
        let f = try fill(c)
        XCTAssertEqual(try c.call(.flush(namespace: [], all: true)).statusCode, .ok)
        XCTAssertNil(try c.get(f.acked[0].0))
        var small = 0
        for i in 0..<100 where try setEventually(c, "small-\(i)", value(100)) { small += 1 }
        XCTAssertEqual(small, 100, "100 B sets after the flush")
        var rng = SplitMix(seed: 98)
        var big = 0
        for i in 0..<(f.acked.count / 2) {
            let v = (0..<(64 << 10)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if try setEventually(c, "big-again-\(i)", v) { big += 1 } else { break }
        }
        XCTAssertEqual(big, f.acked.count / 2, "half as much again once the flushed rows are collected")
        reportFigure("full disk, flush (16 MiB tmpfs)", "\(f.acked.count) × 64 KiB acknowledged, then DISK_FULL; flush OK; 100 × 100 B and \(big) × 64 KiB written again")
        XCTAssertEqual(node.terminate(), 0)
    }

    func testFillRestartWriteAgain() throws {
        let (data, cleanup) = try smallDisk()
        defer { cleanup() }
        var node: NodeProcess? = try NodeProcess(dataDir: data)
        let f = try fill(try node!.connect())
        XCTAssertEqual(node!.terminate(), 0)
        node = nil
        let again = try NodeProcess(dataDir: data)
        let c = try again.connect()
        // It opens on the full disk, serves everything it acknowledged, and takes deletes
        // and, once they free room, writes.
        for (k, v) in f.acked { XCTAssertEqual(try c.get(k, tiers: 2)?.value, v) }
        for (k, _) in f.acked.prefix(8) { XCTAssertEqual(try delete(c, k), .ok) }
        XCTAssertTrue(try setEventually(c, "after-restart", value(100)))
        XCTAssertTrue(try setEventually(c, "after-restart-big", value()))
        reportFigure("full disk, restart (16 MiB tmpfs)", "\(f.acked.count) × 64 KiB acknowledged, then DISK_FULL; restarted, all \(f.acked.count) served, 8 deletes OK, then writes OK")
        XCTAssertEqual(again.terminate(), 0)
    }

    /// Takes every byte left on the filesystem holding `path` (another process filling the
    /// disk, past the room the node keeps for itself).
    private func takeEverything(_ path: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return XCTFail("cannot create \(path)") }
        defer { close(fd) }
        let chunk = [UInt8](repeating: 0, count: 1 << 16)
        while chunk.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) > 0 {}
        // The last partial chunk's bytes were taken; smaller writes take what is left.
        while write(fd, "x", 1) == 1 {}
    }

    /// A node restarted on a disk another process filled to the last byte: the start fails
    /// with exit code 3 and a message naming the full disk, and the small state files it would
    /// rewrite (`node-id`, `cluster-members`) stay whole; once there is room, the next start
    /// works, keeps the identity and records the new member list.
    func testAStartOnAFullDiskExitsAndKeepsTheStateFilesWhole() throws {
        let (data, cleanup) = try smallDisk()
        defer { cleanup() }
        let p = try MemcachedClientTests.freePort(), q = try MemcachedClientTests.freePort()
        var node = try NodeProcess(dataDir: data, port: p, extra: ["--cluster", "127.0.0.1:\(p)"])
        XCTAssertEqual(try node.connect().set(SetRequest(key: b("k"), value: b("v"))).statusCode, .ok)
        node.terminate()
        let id = try String(contentsOfFile: data + "/node-id", encoding: .utf8)
        let members = try String(contentsOfFile: data + "/cluster-members", encoding: .utf8)
        XCTAssertEqual(members, "127.0.0.1:\(p)\n")

        let filler = (data as NSString).deletingLastPathComponent + "/filler"
        takeEverything(filler)
        let exe = try XCTUnwrap(builtExecutable("strata"))
        let both = "127.0.0.1:\(p),127.0.0.1:\(q)"
        // Bounded: `timeout` ends a node that started after all (exit 124 fails the test).
        let r = try runProcess("/usr/bin/timeout", ["30", exe, "serve", "--port", String(p), "--data", data,
                                                     "--cluster", both, "--log-level", "warn"])
        XCTAssertEqual(r.status, 3, r.output)
        XCTAssertTrue(r.output.contains("disk full"), r.output)
        XCTAssertEqual(try String(contentsOfFile: data + "/node-id", encoding: .utf8), id)
        XCTAssertEqual(try String(contentsOfFile: data + "/cluster-members", encoding: .utf8), members)

        unlink(filler)
        node = try NodeProcess(dataDir: data, port: p, extra: ["--cluster", both])
        defer { node.terminate() }
        XCTAssertEqual(try node.connect().get(b("k"))?.value, b("v"), "the acknowledged write survived")
        XCTAssertEqual(try String(contentsOfFile: data + "/node-id", encoding: .utf8), id, "the same identity")
        let recorded = [p, q].map { "127.0.0.1:\($0)" }.sorted().joined(separator: "\n") + "\n"
        XCTAssertTrue(eventually { (try? String(contentsOfFile: data + "/cluster-members", encoding: .utf8)) == recorded })
    }

    /// Fills the file system holding `dir` to its last byte with `dir/filler*` files.
    private func fillUp(_ dir: String) {
        for (i, chunk) in [65_536, 4_096, 1].enumerated() {
            guard let f = fopen(dir + "/filler\(i)", "w") else { continue }
            let block = [UInt8](repeating: 0, count: chunk)
            while fwrite(block, 1, chunk, f) == chunk && fflush(f) == 0 {}
            fclose(f)
        }
    }

    /// Outside review dur3 F1: a store whose log holds a FLUSH that SQLite cannot apply (a full
    /// disk) retries at open for `replayedFlushWait`, then fails with DISK_FULL — it used to
    /// hang for good in its `deinit` (waiting for a sweeper that never started), so the node
    /// neither served nor exited, even on SIGTERM. Once there is room the next open applies the
    /// flush before anything is read.
    func testAnOpenThatCannotApplyAReplayedFlushFailsInsteadOfHanging() throws {
        let (data, cleanup) = try smallDisk()
        defer { cleanup() }
        let mount = (data as NSString).deletingLastPathComponent
        var config = StoreConfiguration(directory: data)
        config.replayedFlushWait = 1
        var store: TieredCache? = try TieredCache(configuration: config)
        for i in 0..<200 { _ = try store!.set(b("old\(i)"), [UInt8](repeating: UInt8(i % 251), count: 2_000), namespace: b("F")) }
        XCTAssertTrue(eventually(10) { store!.stats().disk.items == 200 })
        store!.close()
        // A slow applier: 1,500 writes wait in the log, then the disk fills, then the FLUSH
        // comes behind them — SQLite cannot take the backlog, so the flush stays in the log.
        config.applierDelayForTests = 3
        store = try TieredCache(configuration: config)
        for i in 0..<1_500 { _ = try store!.set(b("new\(i)"), [UInt8](repeating: UInt8(i % 251), count: 2_000), namespace: b("F")) }
        fillUp(mount)
        XCTAssertThrowsError(try store!.flush(namespace: b("F"))) { e in
            XCTAssertEqual((e as? StoreError)?.code, .diskFull, "\(e)")
        }
        store!.close()
        store = nil
        config.applierDelayForTests = 0
        // On the still-full disk: DISK_FULL within seconds, not a hang.
        let opened = Completion<StoreError?>()
        let reopen = config
        Thread.detachNewThread {
            do {
                let s = try TieredCache(configuration: reopen)
                s.close()
                opened.fulfil(nil)
            } catch let e as StoreError { opened.fulfil(e) } catch { opened.fulfil(StoreError(.io, "\(error)")) }
        }
        guard let result = opened.wait(seconds: 30) else { return XCTFail("the open hung") }
        let e = try XCTUnwrap(result, "the open served on a full disk with a FLUSH it could not apply")
        XCTAssertEqual(e.code, .diskFull)
        XCTAssertTrue(e.message.contains("FLUSH"), e.message)
        // Room again: the open applies the flush first; nothing of F is served.
        for i in 0..<3 { unlink(mount + "/filler\(i)") }
        let again = try TieredCache(configuration: config)
        defer { again.close() }
        XCTAssertNil(try again.get(b("old0"), namespace: b("F")))
        XCTAssertNil(try again.get(b("new0"), namespace: b("F")))
    }
}
