import StrataCore
import StrataImage

/// `strata-bench image`: milliseconds per variant, 1024×768 source → 256×256 box, for PNG and
/// WebP sources and WebP/PNG outputs; medians of `--rounds` rounds of `--count` variants each.
struct ImageBench {
    let rounds: Int
    let count: Int

    init(arguments: [String]) throws {
        let o = try Options(arguments, valued: ["--rounds", "--count"], boolean: [])
        rounds = try o.int("--rounds", 3)
        count = try o.int("--count", 20)
    }

    func run() throws {
        var rng = SplitMix(seed: 7)
        // A photo-like source: smooth gradients plus noise (so encoders work as on real images).
        var rgba = [UInt8](repeating: 255, count: 1024 * 768 * 4)
        for y in 0..<768 {
            for x in 0..<1024 {
                let i = (y * 1024 + x) * 4
                let n = UInt8(truncatingIfNeeded: rng.next() % 24)
                rgba[i] = UInt8(x * 255 / 1023) &+ n; rgba[i + 1] = UInt8(y * 255 / 767) &+ n; rgba[i + 2] = UInt8((x + y) % 256)
            }
        }
        guard let png = ImageCodec.encodePNG(rgba: rgba, width: 1024, height: 768),
              let webp = ImageCodec.encodeWebP(rgba: rgba, width: 1024, height: 768, quality: 85) else {
            throw UsageError(message: "could not encode the source images")
        }
        let cases: [(String, [UInt8], VariantSpec)] = [
            ("png → webp q80, contain", png, VariantSpec(maxWidth: 256, maxHeight: 256)),
            ("webp → webp q80, contain", webp, VariantSpec(maxWidth: 256, maxHeight: 256)),
            ("png → webp q80, cover", png, VariantSpec(maxWidth: 256, maxHeight: 256, fit: .cover)),
            ("png → png, contain", png, VariantSpec(maxWidth: 256, maxHeight: 256, format: .png)),
        ]
        print("strata-bench image — 1024×768 source → 256×256 box, median of \(rounds) rounds × \(count) variants")
        for (name, source, spec) in cases {
            var perRound: [Double] = []
            for _ in 0..<rounds {
                let t0 = monotonicSeconds()
                for _ in 0..<count { _ = try ImageCodec.variant(source, spec) }
                perRound.append((monotonicSeconds() - t0) * 1000 / Double(count))
            }
            let ms = Double(Int((median(perRound) * 100).rounded())) / 100
            print(name + String(repeating: " ", count: max(1, 30 - name.count)) + "\(ms) ms per variant")
        }
    }
}
