// strata — start a node, inspect it, get and set from a shell.
//
// Exit codes: 0 success, 1 not found (a miss), 2 bad usage, 3 a connection or server error.
#if canImport(Glibc)
import Glibc
#endif

let args = Array(CommandLine.arguments.dropFirst())
let code = runCLI(args)
exit(code)
