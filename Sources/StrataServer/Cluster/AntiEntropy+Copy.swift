#if canImport(Glibc)
import Glibc
#endif
import StrataClient
import StrataCore
import StrataImage
import StrataStore
import StrataWire

// Anti-entropy's copies (ARCHITECTURE.md "Repair in the nodes"): pulling a peer's newer items
// and tombstones here, pushing this node's to a peer (a round's, and hinted handoff's), and
// what a refusal of either means.
extension AntiEntropy {
    /// The most keys one pipelined batch of copies carries (pushes also stop at `batchBytes`
    /// of values): one round trip per batch instead of one per key.
    static let batchKeys = 64, batchBytes = 1 << 20

    /// Reads `ids` from the peer's disk tier (pipelined) and writes each here with its version;
    /// returns how many took (nothing newer was here).
    func pull(_ ids: [ItemKey], from conn: NodeConnection) throws -> Int {
        var copied = 0, i = 0
        while i < ids.count {
            let chunk = ids[i..<min(i + Self.batchKeys, ids.count)]
            let frames = try conn.callAll(chunk.map { .get(GetRequest(key: $0.key, namespace: $0.namespace, tiers: 2)) })
            for (id, f) in zip(chunk, frames) where try took(id, f) { copied += 1 }
            i += chunk.count
        }
        return copied
    }

    /// Writes the peer's answer to a disk-tier GET of `id` here with its version; true when it
    /// took (nothing newer was here).
    private func took(_ id: ItemKey, _ f: Frame) throws -> Bool {
        let owner = view.replicaSet(namespace: id.namespace, key: id.key).first == view.selfName
        // A copy older than a flush of its namespace here stays out (FlushMarks).
        if f.cas > 0, dispatcher.flushMarks?.superseding(id.namespace, f.cas) != nil { return false }
        if f.statusCode == .notFound {
            guard f.cas > 0 else { return false } // gone meanwhile (expired or removed): nothing to copy
            if case .superseded = try store.remove(id.key, namespace: id.namespace, tiers: .all, version: f.cas) { return false }
        } else {
            try NodeConnection.check(f, allow: [.ok, .negative])
            let item = try Responses.parseGet(f)
            // A node with --validate-images takes no invalid image, from clients or from peers
            // (while the option is rolled out, a peer without it may hold one).
            if dispatcher.validateImages && !item.negative && ImageSniffer.sniff(item.value) != nil,
               (try? ImageCodec.validate(item.value, pixelLimit: dispatcher.imagePixelLimit, decodeLimit: dispatcher.imageDecodeLimit)) == nil {
                stats.syncInvalidImages.add()
                return false
            }
            var o = SetOptions(expiry: item.expiresAt == 0 ? .never : .at(unixMicros: item.expiresAt), flags: item.flags,
                               extended: item.extended, tiers: owner ? .all : .disk, version: item.version)
            o.stale = item.stale; o.negative = item.negative
            let outcome: SetOutcome
            do {
                outcome = try store.set(id.key, item.value, namespace: id.namespace, options: o)
            } catch let e as StoreError where e.code == .valueTooLarge {
                // More than this node's disk budget takes (a peer with a larger limit holds it):
                // not taken, and not a failed round — one such item kept the node unverified for
                // as long as the peer held it (an outside review, cl25).
                stats.syncTooLarge.add()
                return false
            }
            guard case .stored = outcome else { return false }
            // A replica keeps no memory copy: one promoted by an earlier read is older now.
            if !owner { _ = try? store.remove(id.key, namespace: id.namespace, tiers: .memory) }
        }
        dispatcher.leases.revoke(id)
        dispatcher.originalChanged(id)
        stats.syncPulled.add()
        return true
    }

    /// Writes this node's copies of `ids` (items or tombstones) to the peer with their
    /// versions, pipelined in batches (also hinted handoff's copy); returns how many the peer
    /// took (it held nothing newer).
    /// `dropRefused` (a round's pushes, after it took the peer's flush marks): a copy the peer
    /// refuses as older than what it holds goes here too (`refused`).
    @discardableResult
    func push(_ ids: [ItemKey], to peer: NodeAddress, _ conn: NodeConnection, dropRefused: Bool = false) throws -> Int {
        var copied = 0
        var batch: [Request] = [], sent: [(ItemKey, UInt64)] = [], bytes = 0
        func flush() throws {
            for (f, (id, version)) in zip(try conn.callAll(batch), sent) {
                if try pushed(f) { copied += 1 } else if dropRefused { try refused(id, version, f) }
            }
            batch = []; sent = []; bytes = 0
        }
        for id in ids {
            guard let (r, size) = try pushRequest(id, to: peer) else { continue }
            batch.append(r)
            if case .set(let s) = r { sent.append((id, s.version)) } else { sent.append((id, 0)) }
            bytes += size
            if batch.count >= Self.batchKeys || bytes >= Self.batchBytes { try flush() }
        }
        if !batch.isEmpty { try flush() }
        return copied
    }

    /// The request that writes this node's copy of `id` to `peer`, and its value's size; nil
    /// when this node holds nothing for the key.
    private func pushRequest(_ id: ItemKey, to peer: NodeAddress) throws -> (Request, Int)? {
        if id.key.isEmpty { // a flush mark: a FLUSH with its version
            guard let v = dispatcher.flushMarks?.floors().marks[id.namespace] else { return nil }
            return (.flush(namespace: id.namespace, all: false, tiers: 0, version: v), 0)
        }
        let peerIsOwner = view.replicaSet(namespace: id.namespace, key: id.key).first == peer.name
        switch try store.syncRead(id.key, namespace: id.namespace) {
        case .miss:
            // Gone by a disk limit: a delete below the removed write makes an older copy
            // there go, and leaves that write itself if the peer holds it (`EvictedVersions`).
            guard let e = store.evictedDelete(id.key, namespace: id.namespace) else { return nil }
            return (.delete(namespace: id.namespace, key: id.key, tiers: 0, version: e.deleteVersion, writeBehind: false), 0)
        case .tombstone(let v):
            return (.delete(namespace: id.namespace, key: id.key, tiers: 0, version: v, writeBehind: false), 0)
        case .hit(let item):
            var s = SetRequest(key: id.key, value: item.value, namespace: id.namespace)
            s.flags = item.flags; s.extended = item.extended; s.version = item.version
            s.expiry = item.expiresAt.map { .at(unixMicros: $0) } ?? .never
            s.tiers = peerIsOwner ? 0 : 2
            s.stale = item.stale; s.negative = item.negative
            return (.set(s), item.value.count)
        }
    }

    /// A pushed item (`version`; 0 for anything else) the peer refused, in a round, as older
    /// than what it holds: when that is newer than the peer can hand back — a write its disk
    /// limit removed (`EvictedVersions`) — this node's copy is stale, and goes here too, at once
    /// (a delete one below). Else a returning replica served the older value, unflagged, until
    /// the other node's round told it to drop it (an outside review, cl23: 0.2–4.8 s). Not for
    /// hints: a round takes the peer's flush marks before it pushes, a hint does not, and a
    /// copy a flush superseded is for the sweep to remove (its tombstones expire at once;
    /// one kept here differed from the passes in the maintained digests for a day).
    private func refused(_ id: ItemKey, _ version: UInt64, _ f: Frame) throws {
        guard version > 0, f.statusCode == .superseded, f.cas > version + 1 else { return }
        if dispatcher.flushMarks?.superseding(id.namespace, version) != nil { return } // the sweep's
        // The tombstone expires at once, as a flush sweep's: the answer may be a flush mark this
        // node has not taken yet (its bucket not among those compared), and a tombstone kept a
        // day under a mark differs from the passes in the maintained digests all that time.
        if case .removed = try store.remove(id.key, namespace: id.namespace, tiers: .all, version: f.cas - 1, tombstoneLifetime: 0) {
            dispatcher.leases.revoke(id)
            dispatcher.originalChanged(id)
            stats.syncPulled.add()
        }
    }

    /// True when the peer took a pushed copy; throws on an answer other than taken or superseded.
    private func pushed(_ f: Frame) throws -> Bool {
        // A peer with --validate-images refuses an invalid image: not taken, and no failure of
        // the round (an outside review, img2: each refusal failed the round, and the other node
        // then flagged its reads UNVERIFIED for a peer it could reach).
        if f.statusCode == .invalidImage {
            stats.syncInvalidImages.add()
            return false
        }
        // A peer whose disk budget is smaller refuses a value over its largest (TOO_LARGE): not
        // taken, and no failure of the round either.
        if f.statusCode == .tooLarge {
            stats.syncTooLarge.add()
            return false
        }
        try NodeConnection.check(f, allow: [.ok, .notFound, .superseded])
        guard f.statusCode == .ok else { return false }
        stats.syncPushed.add()
        return true
    }
}
