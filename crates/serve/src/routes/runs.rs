//! Reading runs: the table, one run, its events (a page or a live SSE stream), search.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt as _};
use serde::Deserialize;
use serde_json::{Value, json};

use agent_context::limits::MAX_TERM_BYTES;
use agent_host::HostError;
use agent_host::run::table::{load_for_view, runs_table_with, status_with_lease};
use agent_host::run::view::{RunView, now_ms};
use agent_host::run::{RunStatus, kinds};
use agent_journal::{Event, Journal, JournalError};

use crate::app::App;
use crate::error::ApiError;
use crate::events::{self, Converter};

/// Most runs on one page of `GET /runs`.
const MAX_PAGE: usize = 500;
/// Most journal events on one page of `GET /runs/{id}/events`.
const MAX_EVENTS: usize = 5000;

#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    status: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

pub(crate) async fn list(
    State(app): State<Arc<App>>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let status = match q.status.as_deref() {
        None | Some("") | Some("all") => None,
        Some(word) => Some(RunStatus::parse(word).ok_or_else(|| {
            let all: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_request(format!(
                "status: unknown word `{word}`; one of: {}",
                all.join(", ")
            ))
        })?),
    };
    let limit = q.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let now = now_ms();
    let journal = app.journal.get().await;
    let rows = runs_table_with(&journal, &app.row_folds).await?;
    let cursor = q.cursor.as_deref().filter(|c| !c.is_empty());
    if let Some(cursor) = cursor
        && !rows.iter().any(|r| r.run_id == cursor)
    {
        return Err(ApiError::bad_request(format!(
            "cursor: `{cursor}` is no run's id (give the next_cursor of the previous page)"
        )));
    }
    // Newest first; a cursor is the last run id of the previous page.
    let mut page: Vec<Value> = Vec::new();
    let mut more = false;
    for row in rows
        .into_iter()
        .filter(|r| cursor.is_none_or(|c| r.run_id.as_str() < c))
        .filter(|r| status.is_none_or(|s| r.status == s))
    {
        if page.len() == limit {
            more = true;
            break;
        }
        let age = (now - row.created_at).max(0) / 1000;
        let mut value =
            serde_json::to_value(&row).map_err(|e| ApiError::internal(e.to_string()))?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("age_seconds".into(), json!(age));
        }
        page.push(value);
    }
    let next = more
        .then(|| {
            page.last()
                .and_then(|r| r["run_id"].as_str().map(str::to_string))
        })
        .flatten();
    Ok(Json(json!({"runs": page, "next_cursor": next})))
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let journal = app.journal.get().await;
    // From the latest checkpoint: the view is the same, and a long run's history is not read.
    let state = load_for_view(&journal, &id).await?;
    let status = status_with_lease(&journal, &state).await?;
    let mut view = RunView::of(&state, status, now_ms());
    view.children = agent_host::run::view::ChildView::of_run(&journal, &state).await?;
    let mut view = serde_json::to_value(view).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Some(obj) = view.as_object_mut() {
        let prompt = state.spec().map(|s| s.prompt.clone());
        obj.insert("prompt".into(), json!(prompt));
        obj.insert("last_seq".into(), json!(state.last_seq()));
    }
    Ok(Json(view))
}

#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    after: Option<i64>,
    limit: Option<usize>,
}

pub(crate) async fn events(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<Json<Value>, ApiError> {
    let journal = app.journal.get().await;
    must_exist(&journal, &id).await?;
    let after = q.after.unwrap_or(0).max(0);
    let limit = q.limit.unwrap_or(500).clamp(1, MAX_EVENTS);
    let (page, more) = events::page(&app.converters, &journal, &id, after, limit).await?;
    let last = page.last().map_or(after, |e| e.seq);
    Ok(Json(
        json!({"events": page, "last_seq": last, "more": more}),
    ))
}

/// `404` unless run `id` has events, read without reading the run: its thread's last seq.
/// An id no thread can have (too long, a NUL) is no run's, as for the other routes.
async fn must_exist(journal: &Journal, id: &str) -> Result<(), ApiError> {
    let thread = kinds::thread_of(id);
    let valid = thread.len() <= agent_journal::MAX_THREAD_BYTES && !thread.contains('\0');
    let found = valid
        && journal
            .last_seq(&thread)
            .await
            .map_err(HostError::from)?
            .is_some();
    if found {
        Ok(())
    } else {
        Err(HostError::NotFound(id.into()).into())
    }
}

/// `GET /runs/{id}/events/stream`: from `?after=` or `Last-Event-ID`, then live.
pub(crate) async fn stream(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    // The permit first: a stream refused for want of one reads nothing of the journal.
    let permit = Arc::clone(&app.watchers).try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_watchers",
            format!(
                "{} event streams are open, the most this server keeps",
                app.max_watchers
            ),
        )
    })?;
    let journal = app.journal.get().await;
    must_exist(&journal, &id).await?;
    let resumed = headers
        .get("last-event-id")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.trim().parse::<i64>().ok());
    let after = resumed.or(q.after).unwrap_or(0).max(0);
    let conv = Converter::primed(&app.converters, &journal, &id, after).await?;
    let events = agent_host::follow::follow_thread(&journal, &kinds::thread_of(&id), after);
    let stream = messages(events, conv)
        .map(move |message| {
            // The permit lives as long as the stream.
            let _held = &permit;
            Ok(message)
        })
        .boxed();
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The SSE messages of a run's `events`: a `run_event` for each, and for an error (one
/// that reading again cannot mend: a corrupt stored event) one `error` message, after
/// which the stream ends (`follow_thread` ends there too; this keeps the rule for any
/// stream it is given). The journal's tail reports such an error again at every poll; a
/// stream that went on would send it several times a second for as long as the client
/// stayed.
pub(crate) fn messages(
    events: impl Stream<Item = Result<Event, JournalError>>,
    mut conv: Converter,
) -> impl Stream<Item = SseEvent> {
    events.scan(false, move |failed, event| {
        if *failed {
            return std::future::ready(None);
        }
        let message = match event {
            Ok(event) => {
                let api = conv.convert(&event);
                match SseEvent::default()
                    .id(api.seq.to_string())
                    .event("run_event")
                    .json_data(&api)
                {
                    Ok(sse) => sse,
                    Err(err) => SseEvent::default().comment(format!("unencodable: {err}")),
                }
            }
            Err(err) => {
                *failed = true;
                SseEvent::default()
                    .event("error")
                    .data(json!({"message": err.to_string()}).to_string())
            }
        };
        std::future::ready(Some(message))
    })
}

#[derive(Debug, Deserialize)]
pub(crate) struct SearchQuery {
    q: Option<String>,
    run: Option<String>,
    limit: Option<usize>,
}

pub(crate) async fn search(
    State(app): State<Arc<App>>,
    Query(q): Query<SearchQuery>,
) -> Result<Json<Value>, ApiError> {
    let term = q.q.unwrap_or_default();
    if term.trim().is_empty() {
        return Err(ApiError::bad_request("q: the search term is empty"));
    }
    if term.len() > MAX_TERM_BYTES {
        return Err(ApiError::bad_request(format!(
            "q: the search term is {} bytes, the limit is {MAX_TERM_BYTES}",
            term.len()
        )));
    }
    if term.contains('\0') {
        return Err(ApiError::bad_request(
            "q: the search term must not contain NUL characters",
        ));
    }
    let Some(store) = &app.context else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_implemented",
            "this server has no context store to search",
        ));
    };
    let limit = q.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let journal = app.journal.get().await;
    let hits = agent_host::run::history::search(&journal, store, q.run.as_deref(), &term, limit)
        .await
        .map_err(|err| match err {
            agent_host::run::history::HistoryError::Host(err) => ApiError::from(err),
            agent_host::run::history::HistoryError::Context(err) => context_error(&err),
            other => ApiError::internal(other.to_string()),
        })?;
    Ok(Json(json!({ "hits": hits })))
}

/// A context store's error in a search: what it refused of the query is a `400` naming the
/// field (the limit, else the term, `q`); a failure of the store is a `500`.
fn context_error(err: &agent_context::ContextError) -> ApiError {
    use agent_context::ContextError;
    match err {
        ContextError::InvalidLimit { .. } => ApiError::bad_request(format!("limit: {err}")),
        err if err.is_input_refused() => ApiError::bad_request(format!("q: {err}")),
        err => ApiError::internal(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn event(seq: i64) -> Event {
        Event {
            seq,
            thread: Arc::from("run:r1"),
            kind: Arc::from("turn.started"),
            payload: json!({}),
            at: 0,
            dedup_key: None,
            epoch: None,
        }
    }

    #[tokio::test]
    async fn a_stream_ends_after_its_first_error() {
        let journal = agent_journal::Journal::open("memory:").await.unwrap();
        let home = Arc::new(crate::events::Converters::default());
        let conv = Converter::primed(&home, &journal, "r1", 0).await.unwrap();
        let corrupt = || JournalError::CorruptPayload {
            seq: 2,
            source: serde_json::from_str::<Value>("{").unwrap_err(),
        };
        // The journal's tail: an event, then the same error at every poll.
        let events = futures::stream::iter([Ok(event(1)), Err(corrupt()), Err(corrupt())])
            .chain(futures::stream::pending());
        let sent: Vec<SseEvent> = tokio::time::timeout(
            Duration::from_secs(5),
            messages(events, conv).collect::<Vec<_>>(),
        )
        .await
        .expect("the stream did not end after the error");
        let shown: Vec<String> = sent.iter().map(|m| format!("{m:?}")).collect();
        assert_eq!(sent.len(), 2, "{shown:?}");
        assert!(shown[0].contains("run_event"), "{shown:?}");
        assert!(shown[1].contains("error"), "{shown:?}");
    }
}
