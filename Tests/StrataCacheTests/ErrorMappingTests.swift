import XCTest
@testable import StrataCache
@testable import StrataClient
import StrataStore
import StrataWire
import TestSupport

/// `CacheError.mapping`: every lower layer's error becomes one code and, where there is one,
/// the protocol's status.
final class ErrorMappingTests: XCTestCase {
    /// A cluster configuration without nodes or replicas is the caller's error, not an
    /// unreachable cluster (a caller retrying `.unavailable` would retry it forever).
    func testABadClusterConfigurationIsAnInvalidArgument() {
        for config in [ClusterConfiguration(nodes: []), {
            var c = ClusterConfiguration(nodes: [NodeAddress(host: "127.0.0.1", port: 1)])
            c.replicas = 0
            return c
        }()] {
            XCTAssertThrowsError(try StrataCache(.cluster(config))) { e in
                XCTAssertEqual((e as? CacheError)?.code, .invalidArgument, "\(e)")
            }
        }
    }

    func testClientErrorsKeepTheNodesStatus() {
        let server = CacheError.mapping(ClientError(.server, "TOO_LARGE: value is 9 MiB", status: .tooLarge))
        XCTAssertEqual(server.code, .tooLarge)
        XCTAssertEqual(server.status, .tooLarge)
        let busy = CacheError.mapping(ClientError(.server, "BUSY", status: .busy))
        XCTAssertEqual(busy.code, .busy)
        let conn = CacheError.mapping(ClientError(.connection, "cannot connect to 127.0.0.1:1"))
        XCTAssertEqual(conn.code, .unavailable)
        XCTAssertNil(conn.status)
        XCTAssertEqual(CacheError.mapping(ClientError(.protocolViolation, "bad frame")).code, .internalError)
        XCTAssertEqual(CacheError.mapping(ClientError(.server, "AUTH_FAILED", status: .authFailed)).code, .unauthorized)
        XCTAssertEqual(CacheError.mapping(ClientError(.server, "SHUTTING_DOWN", status: .shuttingDown)).code, .closed)
    }

    func testClusterErrorTakesTheFirstNodeStatusElseUnavailable() {
        let withStatus = ClusterError(message: "write reached 0 of 2 nodes", failures: [
            (node: "a:1", reason: "cannot connect to a:1: refused"),
            (node: "b:2", reason: "DISK_FULL: below the free-space floor"),
        ])
        let e = CacheError.mapping(withStatus)
        XCTAssertEqual(e.code, .diskFull)
        XCTAssertEqual(e.status, .diskFull)
        XCTAssertTrue(e.message.contains("b:2"), e.message)
        let none = CacheError.mapping(ClusterError(message: "no node could serve 'k'", failures: [(node: "a:1", reason: "timed out")]))
        XCTAssertEqual(none.code, .unavailable)
        XCTAssertNil(none.status)
        XCTAssertNil(CacheError.leadingStatus("Cannot connect"))
        XCTAssertNil(CacheError.leadingStatus("NOPE: not a status"))
        XCTAssertEqual(CacheError.leadingStatus("CAS_MISMATCH"), .casMismatch)
    }

    func testStoreErrorsMapToTheProtocolsStatuses() {
        let cases: [(StoreError.Code, CacheError.Code, CacheStatus)] = [
            (.invalidKey, .invalidArgument, .invalidArgument), (.invalidNamespace, .invalidArgument, .invalidArgument),
            (.valueTooLarge, .tooLarge, .tooLarge), (.extendedTooLarge, .tooLarge, .tooLarge),
            (.notANumber, .notANumber, .notANumber), (.diskFull, .diskFull, .diskFull),
            (.closed, .closed, .shuttingDown), (.io, .internalError, .serverError), (.corrupt, .internalError, .serverError),
        ]
        for (store, code, status) in cases {
            let e = CacheError.mapping(StoreError(store, "m"))
            XCTAssertEqual(e.code, code, "\(store)")
            XCTAssertEqual(e.status, status, "\(store)")
            XCTAssertNotNil(e.underlying as? StoreError)
        }
    }

    /// A directory another store holds is `.locked` (it was `.internal`), with no protocol status.
    func testADirectoryInUseIsLocked() throws {
        let dir = TempDir()
        let first = try StrataCache(.directory(dir.path))
        defer { first.close() }
        XCTAssertThrowsError(try StrataCache(.directory(dir.path))) { e in
            let c = e as? CacheError
            XCTAssertEqual(c?.code, .locked, "\(e)")
            XCTAssertNil(c?.status)
            XCTAssertTrue(c?.message.contains("in use") == true, "\(e)")
        }
    }

    /// `.nodes` takes one HOST:PORT per element: a comma-separated list in one element is
    /// refused at init (it failed only at the first call, as a name that did not resolve).
    func testANodeListInOneElementIsRefusedAtInit() {
        XCTAssertThrowsError(try StrataCache(.nodes(["127.0.0.1:7400,127.0.0.1:7401"]))) { e in
            XCTAssertEqual((e as? CacheError)?.code, .invalidArgument)
            XCTAssertTrue("\(e)".contains("give one HOST:PORT per element"), "\(e)")
        }
        XCTAssertThrowsError(try StrataCache(.nodes(["my host:7400"])))
        XCTAssertNoThrow(try StrataCache(.nodes(["127.0.0.1:7400", "[::1]:7401"])))
        // dns: and file: entries are parsed (resolved, read) at init, as the CLI's --nodes: a bad one fails
        // there (no name is resolved here: nothing leaves the machine).
        XCTAssertThrowsError(try StrataCache(.nodes(["dns:no-port"]))) { e in
            XCTAssertEqual((e as? CacheError)?.code, .invalidArgument, "\(e)")
        }
        let dir = TempDir()
        FileManager.default.createFile(atPath: dir.path + "/nodes", contents: Data("127.0.0.1:7400\n127.0.0.1:7401\n".utf8))
        XCTAssertNoThrow(try StrataCache(.nodes(["file:" + dir.path + "/nodes"])))
        XCTAssertThrowsError(try StrataCache(.directory(""))) { e in XCTAssertTrue("\(e)".contains("empty path"), "\(e)") }
    }

    func testLoadFailuresCancellationAndPassThrough() {
        let cached = CacheError.mapping(LoadFailure(message: "db down", cached: true))
        XCTAssertEqual(cached.code, .loadFailed)
        XCTAssertEqual(cached.status, .negative)
        XCTAssertEqual(CacheError.mapping(LoadFailure(message: "db down")).code, .loadFailed)
        XCTAssertEqual(CacheError.mapping(CancellationError()).code, .cancelled)
        let own = CacheError(.exists, status: .exists, "present")
        XCTAssertEqual(CacheError.mapping(own).code, .exists)
        XCTAssertEqual(CacheError.mapping(WireError(.malformed, "short extras")).code, .invalidArgument)
        struct Odd: Error {}
        XCTAssertEqual(CacheError.mapping(Odd()).code, .internalError)
        XCTAssertEqual("\(own)", "exists (EXISTS): present")
    }
}
