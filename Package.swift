// swift-tools-version:6.0
import PackageDescription

// Module arrows point one way: StrataCore imports nothing of ours; StrataStore sees no
// socket; only the C shim targets know the C libraries. See ARCHITECTURE.md.
let package = Package(
    name: "Strata",
    products: [
        .library(name: "StrataStore", targets: ["StrataStore"]),
        .library(name: "StrataCore", targets: ["StrataCore"]),
        .library(name: "StrataImage", targets: ["StrataImage"]),
        .library(name: "StrataFuzzEntries", targets: ["StrataFuzzEntries"]),
        .executable(name: "strata-bench", targets: ["strata-bench"]),
        .executable(name: "strata", targets: ["strata"]),
        .library(name: "StrataClient", targets: ["StrataClient"]),
        .library(name: "StrataCache", targets: ["StrataCache"]),
        .executable(name: "strata-example", targets: ["strata-example"]),
        .executable(name: "strata-cache-bench", targets: ["strata-cache-bench"]),
    ],
    targets: [
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        .systemLibrary(name: "CPNG", pkgConfig: "libpng16", providers: [.apt(["libpng-dev"])]),
        .systemLibrary(name: "CWebP", pkgConfig: "libwebpdemux", providers: [.apt(["libwebp-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .target(name: "CLinux"),

        .target(name: "StrataCore", dependencies: ["CLinux"]),
        .target(name: "StrataWire"),
        .target(name: "StrataNet", dependencies: ["StrataCore", "CLinux", "COpenSSL"]),
        // The node talks to its peers (anti-entropy, issue 17) through the client's NodeConnection.
        .target(name: "StrataServer", dependencies: ["StrataCore", "StrataWire", "StrataNet", "StrataStore", "StrataImage", "StrataClient"]),
        .target(name: "StrataClient", dependencies: ["StrataCore", "StrataWire", "StrataNet"]),
        .executableTarget(name: "strata", dependencies: ["StrataServer", "StrataClient", "StrataCore", "StrataWire", "StrataStore"]),
        .target(name: "StrataStore", dependencies: ["StrataCore", "CSQLite", "CZstd", "CLinux"]),
        // The Swift facade (issue 20): one API over a cluster or an embedded store. Nothing of
        // ours imports it.
        .target(name: "StrataCache", dependencies: ["StrataClient", "StrataStore", "StrataCore", "StrataWire", "StrataImage"]),
        // An example service: JSON records read through from a slow loader (run by StrataCacheTests).
        // Built with MemberImportVisibility: importing StrataCache alone must be enough to use
        // its API's members (CacheStatus's, CacheTiers's).
        .executableTarget(name: "strata-example", dependencies: ["StrataCache"],
                          swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        .target(name: "StrataImage", dependencies: ["CPNG", "CWebP"]),
        // Entry points shared by the libFuzzer targets in fuzz/ and the corpus replay test.
        .target(name: "StrataFuzzEntries", dependencies: ["StrataWire", "StrataImage", "StrataStore"]),

        // The facade's cost per GET over the raw client (bench/RESULTS.md).
        .executableTarget(name: "strata-cache-bench", dependencies: ["StrataCache", "StrataClient", "StrataCore"], path: "bench/strata-cache-bench"),
        .executableTarget(name: "strata-bench", dependencies: ["StrataStore", "StrataWire", "StrataNet", "StrataCore", "StrataImage", "StrataClient"], path: "bench/strata-bench"),
        // A child process for the crash test: writes, reports each returned write, gets SIGKILLed.
        .executableTarget(name: "strata-crash-writer", dependencies: ["StrataStore"], path: "Tests/CrashWriter"),
        // A child process for the read-through test: many threads call getOrLoad on one key.
        .executableTarget(name: "strata-load-racer", dependencies: ["StrataClient", "StrataCore"], path: "Tests/LoadRacer"),

        // Helpers shared by the test targets (temp directories, finding built executables).
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        .testTarget(name: "StrataCoreTests", dependencies: ["StrataCore"]),
        .testTarget(name: "StrataWireTests", dependencies: ["StrataWire"]),
        .testTarget(name: "StrataImageTests", dependencies: ["StrataImage", "TestSupport"]),
        .testTarget(name: "StrataFuzzTests", dependencies: ["StrataFuzzEntries"]),
        .testTarget(name: "StrataBenchTests", dependencies: ["strata-bench", "StrataCore", "TestSupport"]),
        // End-to-end: start the real `strata` binary and talk to it over sockets.
        .testTarget(name: "StrataNodeTests", dependencies: ["StrataClient", "StrataServer", "StrataStore", "StrataWire", "StrataCore", "StrataImage", "StrataNet", "TestSupport"]),
        .testTarget(name: "StrataStoreTests", dependencies: ["StrataStore", "TestSupport"]),
        // The facade against the embedded store, a real node, a real cluster, and the example.
        .testTarget(name: "StrataCacheTests", dependencies: ["StrataCache", "StrataClient", "StrataStore", "StrataCore", "StrataWire", "StrataImage", "TestSupport"]),
    ]
)
