import Synchronization

/// A shareable integer counter (relaxed atomic). A class so closures can capture it.
public final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    public init() {}
    @inlinable public func add(_ n: Int = 1) { _add(n) }
    @usableFromInline func _add(_ n: Int) { value.add(n, ordering: .relaxed) }
    public func load() -> Int { value.load(ordering: .relaxed) }
}
