// strata-crash-writer DIR [THREADS]
//
// Environment: STRATA_FSYNC (always|everysec|no, default everysec), STRATA_APPLY_DELAY
// (seconds the log's applier waits before each batch, so unapplied records pile up),
// STRATA_KEYS (each thread cycles over this many keys, overwriting them; default: every write
// a new key). Each line printed is "key#n": the key and the write's number, and the value
// written is valueFor(that line), so the checker knows the newest acknowledged value.
//
// Writes items to a store in DIR from several threads and prints "key\n" on stdout after each
// write returns. The crash test SIGKILLs this process at a random moment and then checks that
// every printed key is readable: an acknowledged write must survive a crash.
import Foundation
import Glibc
import StrataCore
import StrataStore

let args = CommandLine.arguments
guard args.count >= 2 else {
    let msg = "usage: strata-crash-writer DIR [THREADS]\n"
    _ = msg.withCString { write(2, $0, strlen($0)) }
    exit(2)
}
let threads = args.count > 2 ? Int(args[2]) ?? 4 : 4
let keysPerThread = ProcessInfo.processInfo.environment["STRATA_KEYS"].flatMap { Int($0) } ?? Int.max
let store: TieredCache
do {
    var config = StoreConfiguration(directory: args[1])
    config.quickCheckOnOpen = false
    let env = ProcessInfo.processInfo.environment
    if let f = env["STRATA_FSYNC"].flatMap(FsyncPolicy.init(rawValue:)) { config.fsync = f }
    if let d = env["STRATA_APPLY_DELAY"].flatMap(Double.init) { config.applierDelayForTests = d }
    store = try TieredCache(configuration: config)
} catch {
    let msg = "open failed: \(error)\n"
    _ = msg.withCString { write(2, $0, strlen($0)) }
    exit(1)
}

/// The value every key must have: derived from the key so the checker can recompute it.
@Sendable func valueFor(_ key: String) -> [UInt8] { Array(String(repeating: key + ";", count: 20).utf8) }

let pid = getpid()
let done = Counter()
for t in 0..<threads {
    startThread(name: "writer") {
        var i = 0
        while true {
            let key = "p\(pid)-t\(t)-\(i % keysPerThread)"
            let token = key + "#\(i)"
            do {
                _ = try store.set(Array(key.utf8), valueFor(token), options: SetOptions(tiers: i % 2 == 0 ? .all : .disk))
                let line = token + "\n"
                _ = line.withCString { write(1, $0, strlen($0)) }
            } catch {
                let line = "error \(error)\n"
                _ = line.withCString { write(2, $0, strlen($0)) }
            }
            i += 1
        }
    }
}
while true { sleep(60) }
