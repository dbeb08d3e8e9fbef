//! The one verdict every bench prints for a target of an issue.
//!
//! Invariant: a target reads "met" only when its figure was measured, every run behind the
//! figure ended as its bench scripted it (a run that failed, or ended otherwise, makes the
//! figure meaningless, however good it looks), and the figure passes the target's test.

use std::fmt;

/// What one run of a bench says about one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Measured, every run ended as scripted, and the figure passes.
    Met,
    /// Measured, every run ended as scripted, and the figure misses.
    NotMet,
    /// A run behind the figure did not end as scripted (or its process failed).
    RunsFailed,
    /// No figure: the rows were not measured (not asked for, or every process failed).
    NotMeasured,
}

impl Verdict {
    /// The verdict on `figure` (`None`: not measured), taken from runs of which `runs_ok`
    /// says whether every one ended as scripted; `passes` is the target's test.
    ///
    /// A failed run wins over a figure, measured or not: it is reported as not met.
    pub fn of<T>(runs_ok: bool, figure: Option<T>, passes: impl FnOnce(T) -> bool) -> Verdict {
        match (runs_ok, figure.map(passes)) {
            (false, _) => Verdict::RunsFailed,
            (true, None) => Verdict::NotMeasured,
            (true, Some(true)) => Verdict::Met,
            (true, Some(false)) => Verdict::NotMet,
        }
    }

    /// The verdict on a figure that was measured by runs with no outcome to check beyond
    /// finishing (a process that fails gives no figure at all, and the bench stops).
    pub fn measured(passes: bool) -> Verdict {
        Verdict::of(true, Some(passes), |p| p)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Met => "met",
            Verdict::NotMet => "**not met**",
            Verdict::RunsFailed => "**not met** (not every run ended as scripted)",
            Verdict::NotMeasured => "**not measured**",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Verdict;

    #[test]
    fn met_only_when_measured_every_run_ok_and_passing() {
        assert_eq!(Verdict::of(true, Some(60.0), |r| r >= 50.0), Verdict::Met);
        assert_eq!(
            Verdict::of(true, Some(40.0), |r| r >= 50.0),
            Verdict::NotMet
        );
        assert_eq!(
            Verdict::of(false, Some(60.0), |r| r >= 50.0),
            Verdict::RunsFailed
        );
        assert_eq!(
            Verdict::of(false, None::<f64>, |r| r >= 50.0),
            Verdict::RunsFailed
        );
        assert_eq!(
            Verdict::of(true, None::<f64>, |r| r >= 50.0),
            Verdict::NotMeasured
        );
        assert_eq!(Verdict::measured(true), Verdict::Met);
        assert_eq!(Verdict::measured(false), Verdict::NotMet);
    }

    #[test]
    fn only_met_reads_met() {
        for v in [Verdict::NotMet, Verdict::RunsFailed, Verdict::NotMeasured] {
            let text = v.to_string();
            assert!(text.starts_with("**not "), "{text}");
        }
        assert_eq!(Verdict::Met.to_string(), "met");
    }
}
