import XCTest
import StrataNet
@testable import StrataServer
import StrataCore

/// The pure parts of issue 16's limits, with time passed in (no sleeping).
final class AdmissionUnitTests: XCTestCase {
    func testTheRateLimiterLetsOneLineASecondThroughAndCountsTheRest() {
        let l = LogRateLimiter(interval: 1)
        XCTAssertEqual(l.admit(now: 100), 0)
        XCTAssertNil(l.admit(now: 100.2))
        XCTAssertNil(l.admit(now: 100.99))
        XCTAssertEqual(l.admit(now: 101), 2, "two left out since the last line")
        XCTAssertNil(l.admit(now: 101.5))
        XCTAssertEqual(l.admit(now: 105), 1)
        XCTAssertEqual(l.admit(now: 106), 0)
    }

    func testTheDescriptorBudget() {
        let reserve = DescriptorBudget.reserve(sqliteConnections: 39, loops: 2, metricsConnections: 17)
        XCTAssertEqual(reserve, 64 + 78 + 6 + 17)
        XCTAssertEqual(DescriptorBudget(requested: 10_000, fileLimit: 1024, reserve: 165).effective, 859)
        XCTAssertEqual(DescriptorBudget(requested: 500, fileLimit: 1024, reserve: 165).effective, 500)
        XCTAssertEqual(DescriptorBudget(requested: 500, fileLimit: .max, reserve: 165).effective, 500, "unlimited")
        XCTAssertLessThanOrEqual(DescriptorBudget(requested: 500, fileLimit: 100, reserve: 165).effective, 0, "nothing fits")
        // Raise the soft limit only as far as needed and allowed.
        XCTAssertEqual(DescriptorBudget.wantedSoftLimit(requested: 10_000, reserve: 165, soft: 1024, hard: 524_288), 10_165)
        XCTAssertEqual(DescriptorBudget.wantedSoftLimit(requested: 10_000, reserve: 165, soft: 1024, hard: 4096), 4096)
        XCTAssertNil(DescriptorBudget.wantedSoftLimit(requested: 10_000, reserve: 165, soft: 1024, hard: 1024))
        XCTAssertNil(DescriptorBudget.wantedSoftLimit(requested: 100, reserve: 165, soft: 1024, hard: 4096), "enough already")
    }

    final class Item { var live = true }

    func testOldestFirstSkipsTheDeadAndStaysBounded() {
        let q = OldestFirst<Item> { $0.live }
        let items = (0..<10_000).map { _ in Item() }
        for x in items { q.append(x) }
        XCTAssertTrue(q.oldest() === items[0])
        // All but the first die (authenticated or closed): memory follows the live count.
        for x in items.dropFirst() {
            x.live = false
            q.noteLeft()
        }
        XCTAssertEqual(q.live, 1)
        XCTAssertLessThanOrEqual(q.held, 2 * q.live + 64)
        XCTAssertTrue(q.oldest() === items[0])
        items[0].live = false
        q.noteLeft()
        XCTAssertNil(q.oldest())
        let late = Item()
        q.append(late)
        XCTAssertTrue(q.oldest() === late)
    }

    func testTheSpareDescriptorRefusesAWaitingConnectionAndComesBack() throws {
        let (listener, port) = try Socket.listen(XCTUnwrap(SocketAddress(host: "127.0.0.1", port: 0)))
        defer { Sys.close(listener) }
        let spare = SpareDescriptor()
        XCTAssertTrue(spare.isHeld)
        XCTAssertEqual(spare.refuseOne(from: listener) { _ in XCTFail("nothing is waiting") }, .noneWaiting)
        let client = try Socket.connect(XCTUnwrap(SocketAddress(host: "127.0.0.1", port: port)), timeout: 5)
        defer { Sys.close(client) }
        var p = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        XCTAssertEqual(poll(&p, 1, 5000), 1)
        let outcome = spare.refuseOne(from: listener) { fd in
            _ = Array("no".utf8).withUnsafeBytes { try? Sys.send(fd, $0.baseAddress!, $0.count) }
        }
        XCTAssertEqual(outcome, .refused)
        XCTAssertTrue(spare.isHeld)
        var got = [UInt8](repeating: 0, count: 8)
        XCTAssertEqual(read(client, &got, 8), 2)
        XCTAssertEqual(Array(got.prefix(2)), Array("no".utf8))
        XCTAssertEqual(read(client, &got, 8), 0, "then closed")
    }

    /// memcached's exptime in the store's terms: seconds from now stay relative (counted from
    /// the write's microsecond, not from the whole second: an outside review, dur13, saw
    /// `touch k 2` keep the item 1.03–1.86 s); absolute times, 0 and negatives as memcached.
    func testAMemcachedExptimeInSecondsFromNowIsExact() {
        let now: Int64 = 1_800_000_000
        XCTAssertEqual(MemcachedListener.expiry(2, nowUnixSeconds: now), .seconds(2))
        XCTAssertEqual(MemcachedListener.expiry(2_592_000, nowUnixSeconds: now), .seconds(2_592_000))
        XCTAssertEqual(MemcachedListener.expiry(now + 10, nowUnixSeconds: now), .at(unixMicros: (now + 10) * 1_000_000))
        XCTAssertEqual(MemcachedListener.expiry(0, nowUnixSeconds: now), .storeDefault)
        XCTAssertEqual(MemcachedListener.expiry(-1, nowUnixSeconds: now), .at(unixMicros: 1))
        XCTAssertEqual(MemcachedListener.expiry(now - 10, nowUnixSeconds: now), .at(unixMicros: 1))
    }
}
