import Foundation

/// x successes out of n trials.
public struct Proportion: Equatable, Sendable {
    public var successes: Int
    public var trials: Int

    public init(_ successes: Int, of trials: Int) {
        self.successes = successes
        self.trials = trials
    }

    /// x / n, or nil when n is 0.
    public var rate: Double? { trials > 0 ? Double(successes) / Double(trials) : nil }

    /// Fewer than 30 trials, or fewer than 5 successes or failures: too small to judge.
    public var isTooSmall: Bool { trials < 30 || successes < 5 || trials - successes < 5 }
}

public struct Interval: Equatable, Sendable {
    public var low: Double
    public var high: Double
    public init(_ low: Double, _ high: Double) {
        self.low = low
        self.high = high
    }
    public func contains(_ value: Double) -> Bool { value >= low && value <= high }
}

/// An arm compared with its baseline (domain contract section 4).
public struct Comparison: Equatable, Sendable {
    /// p(arm) - p(baseline).
    public var difference: Double
    /// Unpooled Wald interval of the difference.
    public var differenceInterval: Interval
    /// p(arm) / p(baseline) - 1; nil when the baseline rate is 0.
    public var relativeLift: Double?
    /// Pooled two-proportion z statistic; nil when the pooled rate is 0 or 1.
    public var z: Double?
    /// Two-sided p-value of `z`; nil with it.
    public var pValue: Double?
}

public enum Statistics {
    /// The 97.5th percentile of the standard normal distribution (95% two-sided).
    public static let z95 = 1.959964

    /// Wilson score interval: centre (p + z²/2n) / (1 + z²/n), half-width
    /// z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n). Nil when n is 0.
    public static func wilson(_ p: Proportion, z: Double = z95) -> Interval? {
        guard p.trials > 0, let rate = p.rate else { return nil }
        let n = Double(p.trials)
        let denominator = 1 + z * z / n
        let centre = (rate + z * z / (2 * n)) / denominator
        let half = z * (rate * (1 - rate) / n + z * z / (4 * n * n)).squareRoot() / denominator
        // With no failures (no successes) the bound is 1 (0) exactly; computed, it may miss by 1e-16.
        return Interval(p.successes == 0 ? 0 : max(0, centre - half), p.successes == p.trials ? 1 : min(1, centre + half))
    }

    /// Standard normal cumulative distribution function.
    public static func normalCDF(_ x: Double) -> Double { 0.5 * erfc(-x / 2.0.squareRoot()) }

    /// The arm against the baseline; nil when either has no trials.
    public static func compare(_ arm: Proportion, baseline: Proportion, z: Double = z95) -> Comparison? {
        guard let p1 = arm.rate, let p0 = baseline.rate else { return nil }
        let n1 = Double(arm.trials), n0 = Double(baseline.trials)
        let difference = p1 - p0
        let se = (p1 * (1 - p1) / n1 + p0 * (1 - p0) / n0).squareRoot()
        let pooled = Double(arm.successes + baseline.successes) / (n1 + n0)
        let pooledSE = (pooled * (1 - pooled) * (1 / n1 + 1 / n0)).squareRoot()
        let statistic: Double? = pooledSE > 0 ? difference / pooledSE : nil
        return Comparison(
            difference: difference,
            differenceInterval: Interval(difference - z * se, difference + z * se),
            relativeLift: p0 > 0 ? p1 / p0 - 1 : nil,
            z: statistic,
            // 2(1 - Phi(|z|)) written as erfc(|z| / sqrt 2): the subtraction would lose every
            // digit of a small p-value (1 - Phi(8.8) is 0 in doubles).
            pValue: statistic.map { erfc(abs($0) / 2.0.squareRoot()) }
        )
    }
}
