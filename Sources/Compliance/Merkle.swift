import Crypto

/// RFC 6962 (Certificate Transparency) Merkle trees over SHA-256: leaf = H(0x00 || data),
/// node = H(0x01 || left || right), split at the largest power of two below the size.
public enum Merkle {
    public static func leafHash(_ data: [UInt8]) -> [UInt8] { SHA256.hash(prefix: 0x00, data) }
    public static func nodeHash(_ left: [UInt8], _ right: [UInt8]) -> [UInt8] { SHA256.hash(prefix: 0x01, left, right) }

    /// The root over leaf hashes (the empty tree: SHA-256 of nothing). Computed bottom-up,
    /// pairing neighbours and carrying an odd last node up unchanged, which gives the same root
    /// as the recursive definition.
    public static func root(_ leaves: [[UInt8]]) -> [UInt8] {
        guard !leaves.isEmpty else { return SHA256.hash([UInt8]()) }
        var level = leaves
        while level.count > 1 {
            var next: [[UInt8]] = []
            next.reserveCapacity((level.count + 1) / 2)
            var i = 0
            while i + 1 < level.count {
                next.append(nodeHash(level[i], level[i + 1]))
                i += 2
            }
            if i < level.count { next.append(level[i]) }
            level = next
        }
        return level[0]
    }

    /// The audit path of leaf `index` (RFC 6962 section 2.1.1), nearest sibling first.
    public static func auditPath(_ index: Int, _ leaves: ArraySlice<[UInt8]>) -> [[UInt8]] {
        let n = leaves.count
        guard n > 1 else { return [] }
        var k = 1
        while k << 1 < n { k <<= 1 }
        let start = leaves.startIndex
        if index < k {
            return auditPath(index, leaves[start..<(start + k)]) + [root(Array(leaves[(start + k)...]))]
        }
        return auditPath(index - k, leaves[(start + k)...]) + [root(Array(leaves[start..<(start + k)]))]
    }

    /// The root an inclusion proof leads to (RFC 9162 section 2.1.3.2), or nil when the path does
    /// not fit the tree size.
    public static func rootFromPath(leaf: [UInt8], index: Int, size: Int, path: [[UInt8]]) -> [UInt8]? {
        guard index >= 0, index < size else { return nil }
        var fn = index, sn = size - 1
        var r = leaf
        for p in path {
            if sn == 0 { return nil }
            if fn & 1 == 1 || fn == sn {
                r = nodeHash(p, r)
                if fn & 1 == 0 {
                    while fn & 1 == 0 && fn != 0 {
                        fn >>= 1
                        sn >>= 1
                    }
                }
            } else {
                r = nodeHash(r, p)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 ? r : nil
    }
}
