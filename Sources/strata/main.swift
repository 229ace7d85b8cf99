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
    // The bytes as given: printable ASCII as is, the rest as \xNN.
    var shown = ""
    for c in UnsafeBufferPointer(start: raw, count: strlen(raw)) {
        let byte = UInt8(bitPattern: c)
        if byte >= 0x20 && byte < 0x7F { shown.append(Character(UnicodeScalar(byte))); continue }
        let hex = String(byte, radix: 16, uppercase: true)
        shown += "\\x" + (hex.count < 2 ? "0" + hex : hex)
    }
    printErr("strata: argument \(i) ('\(shown)') is not valid UTF-8; keys and names given on the command line are UTF-8 (other bytes are reached through the protocol or the client library)")
    exit(2)
}
let args = Array(CommandLine.arguments.dropFirst())
let code = runCLI(args)
exit(code)
