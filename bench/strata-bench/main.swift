// strata-bench — load generator and benchmarks for Strata.
//
//   strata-bench store [--json] [--rounds N] [--ops N] [--open-dir DIR] [--skip-open] [--skip-memory-footprint]
//   strata-bench run --target strata=127.0.0.1:7400 [--target memcached=…] [--target redis=…] …  (see --help)
//   strata-bench hitratio [--requests N] [--cache-percent 1,5,10] [--variable-sizes] …  (see --help)
//
// `store` runs the embeddable store in-process beside a plain SQLite baseline, in the same run,
// and reports medians over the rounds. See bench/RESULTS.md for figures and how to read them.
import Glibc
import StrataCore

let usage = """
usage: strata-bench COMMAND [options]
  store   the embeddable store in-process beside a plain SQLite baseline
          strata-bench store [--json] [--rounds N] [--ops N] [--open-dir DIR] [--skip-open] [--skip-memory-footprint]
  run     load against Strata nodes, a Strata cluster, memcached and Redis side by side
          strata-bench run --target KIND=HOST:PORT [--target …] … (strata-bench run --help lists every option)
  image   image variant transforms: strata-bench image [--rounds 3] [--count 20]
  hitratio  hit ratio of the memory tier beside LRU, SIEVE, S3-FIFO and W-TinyLFU simulators on seeded
          zipf, scan-mixed and shifting traces: strata-bench hitratio [options] (strata-bench hitratio --help)
See bench/RESULTS.md for figures and how to read them.
"""

let arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else {
    printErr(usage)
    exit(2)
}
do {
    switch command {
    case "store":
        try StoreBench(arguments: Array(arguments.dropFirst())).run()
    case "image":
        try ImageBench(arguments: Array(arguments.dropFirst())).run()
    case "run":
        if arguments.dropFirst().contains("--help") { print(NetBench.usage); exit(0) }
        try NetBench(arguments: Array(arguments.dropFirst())).run()
    case "hitratio":
        if arguments.dropFirst().contains("--help") { print(HitRatioBench.usage); exit(0) }
        try HitRatioBench(arguments: Array(arguments.dropFirst())).run()
    case "store-memory-child":
        // Internal: measures memory per item in a fresh process and prints one number.
        try memoryFootprintChild(count: Int(arguments.dropFirst().first ?? "") ?? 1_000_000)
    case "--help", "-h", "help":
        print(usage)
    default:
        printErr("strata-bench: unknown command '\(command)' (try: store, run, image, hitratio)")
        exit(2)
    }
} catch let e as UsageError {
    printErr("strata-bench: \(e.message)")
    exit(2)
} catch {
    printErr("strata-bench: \(error)")
    exit(1)
}
