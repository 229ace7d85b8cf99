// strata — start a node, inspect it, get and set from a shell.
//
// Exit codes: 0 success, 1 not found (a miss), 2 bad usage, 3 a connection or server error.
#if canImport(Glibc)
import Glibc
#endif

// Arguments are UTF-8: one that is not would reach a command with its bad bytes replaced by
// U+FFFD, so two different names (`--ns $'a\xff'`, `--ns $'a\xfe'`) became one (an outside
// review). Such an argument is refused instead.
for i in 1..<Int(CommandLine.argc) {
    guard let raw = CommandLine.unsafeArgv[i], String(validatingCString: raw) == nil else { continue }
    let shown = String(decoding: Array(UnsafeBufferPointer(start: raw, count: strlen(raw))).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    printErr("strata: argument \(i) ('\(shown)') is not valid UTF-8; keys and names given on the command line are UTF-8 (other bytes are reached through the protocol or the client library)")
    exit(2)
}
let args = Array(CommandLine.arguments.dropFirst())
let code = runCLI(args)
exit(code)
