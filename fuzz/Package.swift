// swift-tools-version:6.0
// libFuzzer targets (not part of `make test`): `make soak` builds them with
//   swift build -c release --sanitize=fuzzer --sanitize=address
// and runs each for a bounded number of runs. Each target defines LLVMFuzzerTestOneInput and no
// main (libFuzzer provides it).
import Foundation
import PackageDescription

// A path dependency's identity is its folder name, whatever the clone is called.
let parent = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent.lowercased()

let flags: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]
let package = Package(
    name: "StrataFuzz",
    dependencies: [.package(path: "..")],
    targets: [
        .executableTarget(name: "fuzz-frames", dependencies: [.product(name: "StrataFuzzEntries", package: parent)], swiftSettings: flags),
        .executableTarget(name: "fuzz-image", dependencies: [.product(name: "StrataFuzzEntries", package: parent)], swiftSettings: flags),
        .executableTarget(name: "fuzz-disk-value", dependencies: [.product(name: "StrataFuzzEntries", package: parent)], swiftSettings: flags),
        .executableTarget(name: "fuzz-memcached", dependencies: [.product(name: "StrataFuzzEntries", package: parent)], swiftSettings: flags),
        .executableTarget(name: "fuzz-log", dependencies: [.product(name: "StrataFuzzEntries", package: parent)], swiftSettings: flags),
    ]
)
