//! The demo's fake app for the observe-act loop: a filter panel and a search query, its
//! two actions, its goal and a policy that reaches it.

use serde::Serialize;

use super::Environment;

/// The demo's fake app: a filter panel and a search query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FilterApp {
    /// Whether the filter panel is open (typing needs it open).
    pub filters_open: bool,
    /// The search query typed so far.
    pub query: String,
}

/// The demo's two actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterAction {
    /// Opens the filter panel.
    OpenFilters,
    /// Types "penguin" into the query (only with the panel open).
    TypePenguin,
}

impl Environment for FilterApp {
    type Observation = FilterApp;
    type Action = FilterAction;

    fn observe(&self) -> FilterApp {
        self.clone()
    }

    fn act(&mut self, action: &FilterAction) -> Result<(), String> {
        match action {
            FilterAction::OpenFilters => {
                self.filters_open = true;
                Ok(())
            }
            FilterAction::TypePenguin if self.filters_open => {
                self.query = "penguin".into();
                Ok(())
            }
            FilterAction::TypePenguin => Err("action not valid in current state".into()),
        }
    }
}

/// The demo's goal: filters open and the query is "penguin".
pub fn filter_goal(o: &FilterApp) -> bool {
    o.filters_open && o.query == "penguin"
}

/// The demo's policy: open the filters, then type.
pub fn filter_policy(o: &FilterApp) -> FilterAction {
    if o.filters_open {
        FilterAction::TypePenguin
    } else {
        FilterAction::OpenFilters
    }
}

/// The demo's action budget: enough for its two actions, with room to spare.
pub const DEMO_BUDGET: usize = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{ObserveError, run_loop};

    #[test]
    fn the_demo_story_succeeds_and_is_verified() {
        let mut app = FilterApp::default();
        let report = run_loop(&mut app, filter_policy, filter_goal, DEMO_BUDGET).unwrap();
        assert_eq!(
            report.actions,
            [FilterAction::OpenFilters, FilterAction::TypePenguin]
        );
        assert!(filter_goal(&report.final_observation));
        assert_eq!(
            app.observe(),
            FilterApp {
                filters_open: true,
                query: "penguin".into()
            }
        );
    }

    #[test]
    fn invalid_action_is_an_error() {
        let mut app = FilterApp::default();
        let err = run_loop(&mut app, |_| FilterAction::TypePenguin, filter_goal, 5).unwrap_err();
        assert!(
            matches!(err, ObserveError::InvalidAction { step: 0, .. }),
            "{err}"
        );
    }

    #[test]
    fn running_out_of_budget_is_an_error() {
        let mut app = FilterApp::default();
        let err = run_loop(&mut app, filter_policy, filter_goal, 1).unwrap_err();
        assert_eq!(err, ObserveError::BudgetExhausted { budget: 1 });
        // Two actions are exactly enough: the goal is checked after the last one.
        let mut app = FilterApp::default();
        assert!(run_loop(&mut app, filter_policy, filter_goal, 2).is_ok());
    }

    #[test]
    fn already_done_needs_no_action() {
        let mut app = FilterApp {
            filters_open: true,
            query: "penguin".into(),
        };
        let report = run_loop(&mut app, filter_policy, filter_goal, 0).unwrap();
        assert!(report.actions.is_empty());
    }
}
