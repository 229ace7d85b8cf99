import Foundation
import XCTest
import StrataCache

// Behaviour every backend must show: each test class (embedded, one node, a cluster) runs
// these against its own cache, so a service sees the same facade whichever it uses.

enum SharedChecks {
    static func codableRoundTrip(_ cache: StrataCache) async throws {
        let p = Profile(id: 42, name: "Ada Lovelace", tags: ["math", "engines"], score: 9.5, nested: ["a": [1, 2], "b": []])
        try await cache.set("profile:42", p, ttl: .seconds(300))
        let back = try await cache.get("profile:42", as: Profile.self)
        XCTAssertEqual(back, p)
        // Stored as JSON: readable as text.
        let text = try await cache.get("profile:42", as: String.self)
        XCTAssertTrue(text?.contains("\"Ada Lovelace\"") ?? false, text ?? "nil")
        let typed: Profile? = try await cache.get("profile:42")
        XCTAssertEqual(typed, p)
        let missing = try await cache.get("profile:43", as: Profile.self)
        XCTAssertNil(missing)
    }

    static func plainValuesAreTheirBytes(_ cache: StrataCache) async throws {
        try await cache.set("s", "héllo")
        let sBytes = try await cache.get("s", as: [UInt8].self)
        XCTAssertEqual(sBytes, Array("héllo".utf8))
        try await cache.set("d", Data([0, 1, 2, 255]))
        let d = try await cache.get("d", as: Data.self)
        XCTAssertEqual(d, Data([0, 1, 2, 255]))
        try await cache.set([0xFF, 0x00, 0x41] as [UInt8], [9, 8, 7] as [UInt8])
        let b = try await cache.get([0xFF, 0x00, 0x41] as [UInt8], as: [UInt8].self)
        XCTAssertEqual(b, [9, 8, 7])
        // Bytes that are not UTF-8 are not a String, and "héllo" is not JSON for a Profile.
        try await cache.set("bin", [0xC3, 0x28] as [UInt8])
        await assertCacheError(.decoding) { try await cache.get("bin", as: String.self) }
        await assertCacheError(.decoding) { try await cache.get("s", as: Profile.self) }
    }

    static func itemCarriesMetadata(_ cache: StrataCache) async throws {
        let expires = Date().addingTimeInterval(3600)
        let v = try await cache.set("meta", "x", expiry: .at(expires), options: WriteOptions(flags: 7, extended: [1, 2, 3]))
        let item = try await cache.item("meta", as: String.self)
        XCTAssertEqual(item?.value, "x")
        XCTAssertEqual(item?.version, v)
        XCTAssertEqual(item?.flags, 7)
        XCTAssertEqual(item?.extended, [1, 2, 3])
        XCTAssertEqual(item?.expiresAt?.timeIntervalSince1970 ?? 0, expires.timeIntervalSince1970, accuracy: 0.001)
        XCTAssertEqual(item?.stale, false)
        try await cache.set("forever", "y", expiry: .never)
        let forever = try await cache.item("forever", as: String.self)
        XCTAssertNotNil(forever)
        XCTAssertNil(forever?.expiresAt)
    }

    static func conditionalWritesAndErrors(_ cache: StrataCache) async throws {
        let v1 = try await cache.set("c", "1", options: WriteOptions(mode: .add))
        await assertCacheError(.exists, status: .exists) { try await cache.set("c", "2", options: WriteOptions(mode: .add)) }
        await assertCacheError(.notFound, status: .notFound) { try await cache.set("absent", "2", options: WriteOptions(mode: .replace)) }
        await assertCacheError(.casMismatch, status: .casMismatch) { try await cache.set("c", "2", options: WriteOptions(mode: .cas(version: v1 &+ 1))) }
        let v2 = try await cache.set("c", "3", options: WriteOptions(mode: .cas(version: v1)))
        XCTAssertGreaterThan(v2, v1)
        // Bad input, checked before anything is sent.
        await assertCacheError(.invalidArgument, status: .invalidArgument) { try await cache.set("", "x") }
        await assertCacheError(.invalidArgument, status: .invalidArgument) { try await cache.set(String(repeating: "k", count: 1025), "x") }
        await assertCacheError(.invalidArgument) { try await cache.namespace(String(repeating: "n", count: 65)).get("k", as: String.self) }
        await assertCacheError(.tooLarge, status: .tooLarge) { try await cache.set("k", "x", options: WriteOptions(extended: [UInt8](repeating: 0, count: 4097))) }
        await assertCacheError(.invalidArgument) { try await cache.set("k", "x", ttl: .zero) }
        await assertCacheError(.invalidArgument, status: .invalidArgument) { try await cache.value(for: "k0", ttl: .zero) { "x" } }
        // A TTL past what microseconds hold is the latest time there is, on every backend (a node
        // refused it as "not positive" while the embedded store kept it: outside review api1).
        _ = try await cache.set("long-lived", "x", ttl: .seconds(Int64.max / 2))
        let longLived = try await cache.get("long-lived", as: String.self)
        XCTAssertEqual(longLived, "x")
        // Counters.
        let one = try await cache.increment("hits", initial: 1)
        XCTAssertEqual(one, 1)
        let six = try await cache.increment("hits", by: 5)
        XCTAssertEqual(six, 6)
        let four = try await cache.decrement("hits", by: 2)
        XCTAssertEqual(four, 4)
        let none = try await cache.increment("no-counter")
        XCTAssertNil(none)
        try await cache.set("word", "abc")
        await assertCacheError(.notANumber, status: .notANumber) { try await cache.increment("word") }
        // Remove.
        let removed = try await cache.remove("c")
        XCTAssertTrue(removed)
        let again = try await cache.remove("c")
        XCTAssertFalse(again)
        let gone = try await cache.get("c", as: String.self)
        XCTAssertNil(gone)
    }

    static func namespacesAreIsolated(_ cache: StrataCache) async throws {
        let alice = cache.namespace("user-alice"), bob = cache.namespace("user-bob")
        try await alice.set("profile", "alice's")
        try await bob.set("profile", "bob's")
        try await cache.set("profile", "the default namespace's")
        for i in 0..<20 { try await alice.set("k\(i)", i) }
        let a = try await alice.get("profile", as: String.self)
        let b = try await bob.get("profile", as: String.self)
        XCTAssertEqual(a, "alice's")
        XCTAssertEqual(b, "bob's")
        let k3 = try await alice.get("k3", as: Int.self)
        XCTAssertEqual(k3, 3)
        let bk3 = try await bob.get("k3", as: Int.self)
        XCTAssertNil(bk3)
        try await alice.removeAll()
        for i in 0..<20 {
            let v = try await alice.get("k\(i)", as: Int.self)
            XCTAssertNil(v)
        }
        let a2 = try await alice.get("profile", as: String.self)
        XCTAssertNil(a2)
        let b2 = try await bob.get("profile", as: String.self)
        XCTAssertEqual(b2, "bob's")
        let d2 = try await cache.get("profile", as: String.self)
        XCTAssertEqual(d2, "the default namespace's")
        // Writes after the flush are seen.
        try await alice.set("profile", "alice again")
        let a3 = try await alice.get("profile", as: String.self)
        XCTAssertEqual(a3, "alice again")
    }

    static func namespaceStats(_ cache: StrataCache, copies: Int = 1) async throws {
        let ns = cache.namespace("stats-ns")
        for i in 0..<10 { try await ns.set("k\(i)", "value-\(i)") }
        for i in 0..<15 { _ = try await ns.get("k\(i)", as: String.self) } // 10 hits, 5 misses
        let s = try await ns.stats()
        XCTAssertEqual(s.items, 10 * copies)
        XCTAssertEqual(s.hits, 10)
        // On a cluster each miss is also looked up on the key's other nodes: every node just
        // started, and a node's misses are verified with the replicas for its rejoin window
        // (PROTOCOL.md §7.1), so each node counts it.
        XCTAssertEqual(s.misses, 5 * copies)
        XCTAssertEqual(s.sets, 10 * copies)
        XCTAssertGreaterThan(s.bytes, 0)
        XCTAssertEqual(s.hitRatio ?? 0, 10.0 / Double(10 + 5 * copies), accuracy: 1e-9)
        let other = try await cache.namespace("never-used").stats()
        XCTAssertEqual(other.items, 0)
        XCTAssertEqual(other.sets, 0)
    }

    /// The loader runs once however many of 100 tasks ask at the same time; every task gets
    /// its value.
    /// A loader that reads its own key through the cache (directly or through another
    /// loader) is refused at once instead of waiting for its own load forever (outside review
    /// api1: both backends hung); a loader reading another key works.
    static func loaderReadingItsOwnKeyIsRefused(_ cache: StrataCache) async throws {
        let started = Date()
        for direct in [true, false] {
            let key = direct ? "self-ref" : "cycle-a"
            do {
                _ = try await cache.value(for: key) { () async throws -> Int in
                    direct ? try await cache.value(for: key) { 1 }
                           : try await cache.value(for: "cycle-b") { try await cache.value(for: key) { 1 } }
                }
                XCTFail("\(key): a loader reading its own key must be refused")
            } catch let e as CacheError {
                XCTAssertEqual(e.code, .loadFailed, "\(e)")
                XCTAssertTrue(e.message.contains("would wait for its own load"), "\(e)")
            }
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "refused at once, not after a timeout")
        let v = try await cache.value(for: "outer") { try await cache.value(for: "inner") { 2 } + 1 }
        XCTAssertEqual(v, 3)
        // Two tasks whose loaders read each other's keys (P's reads Q, Q's reads P) deadlocked
        // on every backend (outside review api2): one of them is refused, neither hangs.
        let crossStarted = Date()
        let p = Task { () async throws -> Int in
            try await cache.value(for: "cross-p") { () async throws -> Int in
                try await Task.sleep(nanoseconds: 200_000_000)
                return try await cache.value(for: "cross-q") { 1 } + 10
            }
        }
        let q = Task { () async throws -> Int in
            try await cache.value(for: "cross-q") { () async throws -> Int in
                try await Task.sleep(nanoseconds: 200_000_000)
                return try await cache.value(for: "cross-p") { 2 } + 20
            }
        }
        let results = [await p.result, await q.result]
        XCTAssertLessThan(Date().timeIntervalSince(crossStarted), 5, "neither load waits for the other forever")
        XCTAssertTrue(results.contains { if case .failure(let e) = $0 { return "\(e)".contains("would wait for its own load") }; return false }, "\(results)")
        // A loader that reads two keys at once (a task group) waits for both: a cycle through
        // either one is seen (the graph kept only the last wait, so one through the first hung).
        let groupStarted = Date()
        let gp = Task { () async throws -> Int in
            try await cache.value(for: "grp-p") { () async throws -> Int in
                try await Task.sleep(nanoseconds: 100_000_000)
                return try await withThrowingTaskGroup(of: Int.self) { group in
                    group.addTask { try await cache.value(for: "grp-q") { 1 } }
                    group.addTask { try await Task.sleep(nanoseconds: 20_000_000); return try await cache.value(for: "grp-r") { try await Task.sleep(nanoseconds: 400_000_000); return 2 } }
                    return try await group.reduce(0, +)
                }
            }
        }
        let gq = Task { () async throws -> Int in
            try await cache.value(for: "grp-q") { () async throws -> Int in
                try await Task.sleep(nanoseconds: 250_000_000)
                return try await cache.value(for: "grp-p") { 3 }
            }
        }
        let groupResults = [await gp.result, await gq.result]
        XCTAssertLessThan(Date().timeIntervalSince(groupStarted), 5, "no load waits for itself through a task group")
        XCTAssertTrue(groupResults.contains { if case .failure(let e) = $0 { return "\(e)".contains("would wait for its own load") }; return false }, "\(groupResults)")
        // A task started inside a loader outlives it: once the load is done, reading the key
        // from that task is a plain read (it was refused as a cycle: api2).
        let spawned = SpawnedTask()
        let five = try await cache.value(for: "spawner") { () async throws -> Int in
            spawned.set(Task { try await Task.sleep(nanoseconds: 300_000_000); return try await cache.value(for: "spawner") { 99 } })
            return 5
        }
        XCTAssertEqual(five, 5)
        let later = try await XCTUnwrap(spawned.get()).value
        XCTAssertEqual(later, 5, "the cached value, not a refusal")
        let inner = try await cache.get("inner", as: Int.self)
        XCTAssertEqual(inner, 2)
    }

    static func readThroughLoadsOnce(_ cache: StrataCache) async throws {
        let calls = CallCounter()
        let p = Profile(id: 7, name: "loaded", tags: [], score: nil, nested: [:])
        let origins = try await withThrowingTaskGroup(of: ReadThroughResult<Profile>.self) { group in
            for _ in 0..<100 {
                group.addTask {
                    try await cache.readThrough("user:7", ttl: .seconds(300)) {
                        await calls.increment()
                        try await Task.sleep(for: .milliseconds(100))
                        return p
                    }
                }
            }
            var all: [ReadThroughResult<Profile>] = []
            for try await r in group { all.append(r) }
            return all
        }
        let n = await calls.count
        XCTAssertEqual(n, 1)
        XCTAssertEqual(origins.count, 100)
        XCTAssertTrue(origins.allSatisfy { $0.value == p })
        XCTAssertEqual(origins.filter { $0.origin == .loaded }.count, 1)
        XCTAssertEqual(origins.filter(\.isHit).count, 99)
        // Now cached: the loader does not run.
        let again = try await cache.value(for: "user:7", ttl: .seconds(300)) { () async throws -> Profile in
            await calls.increment()
            return p
        }
        XCTAssertEqual(again, p)
        let n2 = await calls.count
        XCTAssertEqual(n2, 1)
    }

    /// Stale-while-revalidate: an invalidated value is still read (flagged stale) until a
    /// read-through refreshes it.
    static func invalidateThenRefresh(_ cache: StrataCache) async throws {
        try await cache.set("inv", "old")
        let found = try await cache.invalidate("inv")
        XCTAssertTrue(found)
        let stale = try await cache.item("inv", as: String.self)
        XCTAssertEqual(stale?.value, "old")
        XCTAssertEqual(stale?.stale, true)
        let r = try await cache.readThrough("inv", ttl: .seconds(60)) { "new" }
        XCTAssertEqual(r.value, "new")
        XCTAssertEqual(r.origin, .refreshed)
        let fresh = try await cache.item("inv", as: String.self)
        XCTAssertEqual(fresh?.value, "new")
        XCTAssertEqual(fresh?.stale, false)
        let absent = try await cache.invalidate("never-set")
        XCTAssertFalse(absent)
    }

    static func loaderErrorsReachTheCaller(_ cache: StrataCache) async throws {
        do {
            _ = try await cache.value(for: "broken") { () async throws -> String in throw LoaderBroke(reason: "db down") }
            XCTFail("no error")
        } catch let e as CacheError {
            XCTAssertEqual(e.code, .loadFailed)
            XCTAssertEqual(e.underlying as? LoaderBroke, LoaderBroke(reason: "db down"))
        }
        // Not remembered: the next call loads.
        let v = try await cache.value(for: "broken") { "fixed" }
        XCTAssertEqual(v, "fixed")
    }

    /// Cancelling a task ends its wait at once, even though the loader it waits for takes long.
    static func cancellationEndsTheWait(_ cache: StrataCache) async throws {
        let started = CallCounter()
        let t0 = Date()
        let task = Task { () -> (any Error)? in
            do {
                _ = try await cache.value(for: "slow") { () async throws -> String in
                    await started.increment()
                    try? await Task.sleep(for: .seconds(2))
                    return "late"
                }
                return nil
            } catch { return error }
        }
        while await started.count == 0 { try await Task.sleep(for: .milliseconds(5)) }
        task.cancel()
        let error = await task.value
        XCTAssertEqual((error as? CacheError)?.code, .cancelled, "\(String(describing: error))")
        XCTAssertLessThan(Date().timeIntervalSince(t0), 1.5)
        // A task cancelled before it calls starts nothing.
        let early = Task { () -> (any Error)? in
            while !Task.isCancelled { await Task.yield() }
            do { try await cache.set("never-written", "x"); return nil } catch { return error }
        }
        early.cancel()
        let earlyError = await early.value
        XCTAssertEqual((earlyError as? CacheError)?.code, .cancelled)
        let never = try await cache.get("never-written", as: String.self)
        XCTAssertNil(never)
    }

    /// 100 tasks at once: each writes and reads its own keys and bumps one shared counter.
    static func concurrentUseFrom100Tasks(_ cache: StrataCache) async throws {
        let ns = cache.namespace("concurrent")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for t in 0..<100 {
                group.addTask {
                    for i in 0..<5 {
                        let p = Profile(id: t * 10 + i, name: "t\(t)", tags: ["\(i)"], score: Double(i), nested: [:])
                        try await ns.set("t\(t):\(i)", p)
                        let back = try await ns.get("t\(t):\(i)", as: Profile.self)
                        XCTAssertEqual(back, p)
                    }
                    _ = try await ns.increment("total", initial: 1)
                }
            }
            try await group.waitForAll()
        }
        // `initial` stores 1 for whoever found it absent; every other task added 1.
        let total = try await ns.get("total", as: String.self)
        XCTAssertEqual(total, "100")
    }
}

/// An actor that owns a cache handle: the facade crosses actor boundaries as a `Sendable` value.
actor ProfileService {
    let cache: StrataCache
    init(cache: StrataCache) { self.cache = cache.namespace("service") }
    func profile(_ id: Int) async throws -> Profile {
        try await cache.value(for: "p\(id)", ttl: .seconds(60)) {
            Profile(id: id, name: "p\(id)", tags: [], score: nil, nested: [:])
        }
    }
}

/// A task a loader starts, handed out of it.
final class SpawnedTask: @unchecked Sendable {
    private let lock = NSLock()
    private var task: Task<Int, Error>?
    func set(_ t: Task<Int, Error>) { lock.lock(); task = t; lock.unlock() }
    func get() -> Task<Int, Error>? { lock.lock(); defer { lock.unlock() }; return task }
}
