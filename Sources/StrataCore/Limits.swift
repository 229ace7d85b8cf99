/// Sizes the whole system agrees on (DESIGN.md, "The item").
public enum ItemLimits {
    public static let maxKeyBytes = 1024
    public static let maxNamespaceBytes = 64
    public static let maxExtendedBytes = 4096
    public static let defaultMaxItemBytes = 32 << 20
}
