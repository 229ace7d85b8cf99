import StrataCore
import StrataImage
import StrataStore
import StrataWire

// Images in the dispatcher: variants (IMAGE_VARIANT, computed once and stored under a derived
// key), the lineage that drops them when their original changes, image validation and the
// image pools' lanes, and the per-format count. Moved from Dispatch.swift unchanged.
extension Dispatcher {
    /// The item under `id` got a new version or was deleted: its variants (made from an older
    /// version) are removed in the background. If the queue is full they stay recorded, and
    /// the next change tries again.
    func originalChanged(_ id: ItemKey) {
        guard let keys = lineage.take(id) else { return }
        let store = self.store, stats = self.stats
        let queued = background {
            for k in keys {
                if case .removed? = try? store.remove(k, namespace: id.namespace, tiers: .all) { stats?.variantsDropped.add() }
            }
        }
        if !queued { for k in keys { lineage.record(original: id, derivedKey: k) } }
    }

    /// Records the variants on disk at start (a background pass over the disk tier's keys).
    func recoverLineage() {
        for ns in store.namespaceNames() {
            var cursor: [UInt8]? = nil
            repeat {
                guard let page = try? store.keys(namespace: ns, after: cursor, limit: 1000, tiers: .disk) else { break }
                lineage.recover(namespace: ns, keys: page.keys)
                cursor = page.next
            } while cursor != nil
        }
    }

    /// Counts an image that a SET stored, by format.
    func countImage(_ s: SetRequest, _ out: SetOutcome) {
        guard out.isStored, let stats, let format = ImageSniffer.sniff(s.value) else { return }
        stats.imagesStored[Int(format.rawValue)].add()
    }

    /// Whether a SET must be checked as an image before it is stored (then it runs on the
    /// image worker pool, never on the event loop).
    /// A negative entry's value is a failure's message, never checked as an image by
    /// `--validate-images` (only an explicit VALIDATE_IMAGE checks it).
    func needsImageValidation(_ s: SetRequest) -> Bool {
        s.validateImage || (validateImages && !s.negative && ImageSniffer.sniff(s.value) != nil)
    }

    /// Whether an image job's decode is small by the headers it carries (a SET to validate
    /// whose image promises at most 4 MiB decoded, or IMAGE_INFO, which reads headers only):
    /// such jobs run on their own lane and never wait behind large decodes.
    static func isSmallImageJob(_ r: Request) -> Bool {
        switch r {
        case .set(let s): return (ImageCodec.declaredDecodeBytes(s.value) ?? 0) <= 4 << 20
        case .imageInfo: return true
        default: return false
        }
    }

    /// Stored variants of one original at most (PROTOCOL.md §7.16).
    static let maxStoredVariants = 32

    /// IMAGE VARIANT: the stored variant, or computed once (single flight), stored and returned.
    /// The variant's key carries the original's version, so a variant is always of the current
    /// original; a write that changes the original's version or deletes it drops the old ones
    /// (`originalChanged`), and a deleted original makes the request NOT_FOUND.
    func variant(_ v: VariantRequest, _ f: Frame) throws -> Frame {
        // A negative entry (a cached load failure) is no image: absent here, as for GET's value.
        guard let original = try store.get(v.key, namespace: v.namespace), !original.negative else { return Responses.status(to: f, .notFound) }
        var spec = VariantSpec(maxWidth: Int(v.maxWidth), maxHeight: Int(v.maxHeight), fit: v.fit == 1 ? .cover : .contain,
                               format: v.format == 1 ? .png : .webp, quality: v.quality == 255 ? nil : Int(v.quality))
        // A box larger than the image makes the variant of the image's size: one stored copy
        // for all such boxes (headers only; an image that does not parse fails below).
        if let info = try? ImageCodec.inspect(original.value, pixelLimit: imagePixelLimit) {
            spec = spec.clamped(width: info.width, height: info.height)
        }
        let derived = VariantLineage.derivedKey(v.key, version: original.version, spec: spec.canonical)
        let originalID = ItemKey(namespace: v.namespace, key: v.key)
        guard derived.count <= ItemLimits.maxKeyBytes else {
            return Responses.error(to: f, .invalidArgument, "the key is too long to derive a variant key from (limit \(ItemLimits.maxKeyBytes) bytes)")
        }
        /// The stored variant, if there is one (counted as a hit).
        func stored() throws -> (bytes: [UInt8], width: Int, height: Int, stored: Bool)? {
            guard let cached = try store.get(derived, namespace: v.namespace), cached.extended.count == 4 else { return nil }
            stats?.variantHits.add()
            lineage.record(original: originalID, derivedKey: derived)
            return (cached.value, Int(cached.extended[0]) << 8 | Int(cached.extended[1]),
                    Int(cached.extended[2]) << 8 | Int(cached.extended[3]), true)
        }
        let flightKey = ItemKey(namespace: v.namespace, key: derived)
        let made: (value: (bytes: [UInt8], width: Int, height: Int, stored: Bool), shared: Bool)
        do {
            if let hit = try stored() {
                made = (hit, false)
            } else {
                made = try variantFlights.run(flightKey) {
                    // Looked again inside the flight: a flight for this variant may have finished
                    // (and stored it) between the lookup above and this one starting.
                    if let hit = try stored() { return hit }
                    let t0 = monotonicSeconds()
                    let r = try ImageCodec.variant(original.value, spec, pixelLimit: imagePixelLimit, decodeLimit: imageDecodeLimit)
                    stats?.variantsComputed.add()
                    stats?.transformMicros.add(Int((monotonicSeconds() - t0) * 1e6))
                    // Stored variants are bounded per original (a reader asking for every size
                    // would otherwise fill the disk tier and evict the writers' items); past
                    // the bound a variant is answered and made again when asked again.
                    guard lineage.count(originalID) < Self.maxStoredVariants else {
                        stats?.variantsNotStored.add()
                        return (r.bytes, r.width, r.height, false)
                    }
                    let ext: [UInt8] = [UInt8(r.width >> 8 & 0xFF), UInt8(r.width & 0xFF), UInt8(r.height >> 8 & 0xFF), UInt8(r.height & 0xFF)]
                    do {
                        _ = try store.set(derived, r.bytes, namespace: v.namespace,
                                          options: SetOptions(expiry: original.expiresAt.map { .at(unixMicros: $0) } ?? .never, extended: ext,
                                                              tiers: Tiers(wire: f.tiers)))
                    } catch let e as StoreError where e.code == .valueTooLarge {
                        // Say it was the variant (an outside review, img1: the store's message
                        // read as if the request's value were too large).
                        throw StoreError(.valueTooLarge, "the \(r.width)×\(r.height) variant is too large to store: \(e.message) (ask for a smaller box or a lossy WebP)")
                    }
                    lineage.record(original: originalID, derivedKey: derived)
                    // The original may have changed while the variant was made: that write's drop
                    // ran before this variant was recorded, so it is dropped now (an outside
                    // review, img2: such variants outlived the change, 12 of 12 runs).
                    if (try? store.metadata(v.key, namespace: v.namespace))??.version != original.version { originalChanged(originalID) }
                    return (r.bytes, r.width, r.height, false)
                }
            }
        } catch let e as ImageError {
            return Responses.error(to: f, .invalidImage, e.message)
        }
        return Responses.imageVariant(to: f, bytes: made.value.bytes, width: UInt16(clamping: made.value.width),
                                      height: UInt16(clamping: made.value.height), cached: made.shared || made.value.stored,
                                      version: original.version, stale: original.stale)
    }
}
