//! The HTTP surface: `POST /v1/responses`, `POST /v1/responses/compact`,
//! `GET /v1/responses/{id}`. Handlers never hold a lock across an await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use agent_responses::types::{CompactRequest, CreateResponse, Item, Usage};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::bounded::{Recent, RecentMap};
use crate::respond::{finish_item, new_id, response_object, tokens};
use crate::script::{
    Endpoint, Fault, FaultKind, Reply, RequestView, Script, echo_items, input_items, render,
};
use crate::sse;
use crate::validate::{ApiFailure, Issued, check_auth, check_context, previous_not_found};

/// One request as the emulator received it (the bearer key is redacted).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Value::Null` when it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// A header's value (names are lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Request headers that carry credentials; recorded as `<redacted>`.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
];

struct Stored {
    response: Value,
    context: Vec<Item>,
}

/// Shared emulator state.
pub(crate) struct AppState {
    pub api_key: Option<String>,
    pub script: Script,
    used: Mutex<Vec<u32>>,
    store: Mutex<RecentMap<String, Stored>>,
    issued: Mutex<Issued>,
    pub recorded: Mutex<Recent<RecordedRequest>>,
    gates: Mutex<HashMap<String, Arc<Notify>>>,
    /// WebSocket mode settings and state shared by its connections.
    pub ws: crate::ws::WsShared,
    /// Characters per streamed delta when a rule does not say.
    pub delta_chars: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl AppState {
    pub fn new(script: Script, api_key: Option<String>) -> Self {
        let rules = script.rules.len();
        Self {
            api_key,
            script,
            used: Mutex::new(vec![0; rules]),
            store: Mutex::new(RecentMap::default()),
            issued: Mutex::new(Issued::default()),
            recorded: Mutex::new(Recent::default()),
            gates: Mutex::new(HashMap::new()),
            delta_chars: 8,
            ws: crate::ws::WsShared::default(),
        }
    }

    pub fn gate(&self, name: &str) -> Arc<Notify> {
        Arc::clone(lock(&self.gates).entry(name.to_owned()).or_default())
    }

    /// Keeps a request for inspection (the most recent
    /// [`MAX_RECORDED`](crate::bounded::MAX_RECORDED)); called once the request passed the
    /// key check. Credentials in any of [`SECRET_HEADERS`] are redacted.
    fn record(&self, method: &Method, path: &str, headers: &HeaderMap, body: &[u8]) {
        let headers = headers
            .iter()
            .map(|(k, v)| {
                let value = if SECRET_HEADERS.contains(&k.as_str()) {
                    "<redacted>".to_owned()
                } else {
                    String::from_utf8_lossy(v.as_bytes()).into_owned()
                };
                (k.as_str().to_owned(), value)
            })
            .collect();
        let body = serde_json::from_slice(body).unwrap_or(Value::Null);
        lock(&self.recorded).push(RecordedRequest {
            method: method.to_string(),
            path: path.to_owned(),
            headers,
            body,
        });
    }

    /// The first rule that matches and is not used up; marks it used.
    fn pick(&self, view: &RequestView<'_>) -> Option<(Reply, Option<Fault>)> {
        let mut used = lock(&self.used);
        for (i, rule) in self.script.rules.iter().enumerate() {
            let available = rule
                .times
                .is_none_or(|t| used.get(i).copied().unwrap_or(0) < t);
            if available && rule.when.matches(view) {
                if let Some(n) = used.get_mut(i) {
                    *n += 1;
                }
                return Some((rule.reply.clone(), rule.fault.clone()));
            }
        }
        None
    }

    fn context_of(&self, previous: Option<&str>) -> Result<Vec<Item>, ApiFailure> {
        match previous {
            None => Ok(Vec::new()),
            Some(id) => lock(&self.store)
                .get(id)
                .map(|s| s.context.clone())
                .ok_or_else(|| previous_not_found(id)),
        }
    }
}

/// The axum router over `state`.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/responses", post(create).get(crate::ws::upgrade))
        .route("/v1/responses/compact", post(compact))
        .route("/v1/responses/{id}", get(retrieve))
        .route("/__mock/requests", get(recorded_requests))
        .fallback(not_found)
        .method_not_allowed_fallback(wrong_method)
        .with_state(state)
}

fn base_headers(builder: axum::http::response::Builder) -> axum::http::response::Builder {
    builder
        .header("x-request-id", new_id("req"))
        .header("openai-version", "2020-10-01")
        .header("openai-processing-ms", "1")
}

fn json_response(status: u16, body: &Value) -> Response {
    base_headers(Response::builder())
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

fn failure(f: &ApiFailure) -> Response {
    let mut response = json_response(f.status, &f.body());
    for (name, value) in &f.headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

fn error_reply(e: &crate::script::ErrorReply) -> ApiFailure {
    ApiFailure {
        status: e.status,
        message: e.message.clone(),
        kind: e
            .kind
            .clone()
            .unwrap_or_else(|| default_kind(e.status).to_owned()),
        code: e.code.clone(),
        param: e.param.clone(),
        headers: e
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_lowercase(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                )
            })
            .collect(),
    }
}

fn default_kind(status: u16) -> &'static str {
    match status {
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

fn parse_failure(err: &serde_json::Error) -> ApiFailure {
    ApiFailure::invalid(
        format!(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.) ({err})"
        ),
        None,
        None,
    )
}

async fn not_found(method: Method, uri: axum::http::Uri) -> Response {
    failure(&request_error(
        404,
        format!("Invalid URL ({method} {})", uri.path()),
    ))
}

/// A known path with a method it does not serve: the API's JSON error, not an empty 405.
async fn wrong_method(method: Method, uri: axum::http::Uri) -> Response {
    failure(&request_error(
        405,
        format!("Invalid method for URL ({method} {})", uri.path()),
    ))
}

/// A request body within axum's limit (2 MiB); one that cannot be read (too large, cut
/// off) is answered with the API's JSON error instead of axum's plain text.
struct ApiBody(Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBody {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        Bytes::from_request(request, state)
            .await
            .map(ApiBody)
            .map_err(|rejection| {
                failure(&request_error(
                    rejection.status().as_u16(),
                    format!(
                        "The request body could not be read: {}",
                        rejection.body_text()
                    ),
                ))
            })
    }
}

fn request_error(status: u16, message: String) -> ApiFailure {
    ApiFailure {
        status,
        message,
        kind: "invalid_request_error".into(),
        code: None,
        param: None,
        headers: Vec::new(),
    }
}

async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> Response {
    match create_inner(&state, &headers, &body) {
        Ok(Created::Json(value)) => json_response(200, &value),
        Ok(Created::Stream {
            response,
            fault,
            delta_chars,
        }) => stream_body(&state, &response, fault, delta_chars),
        Err(f) => failure(&f),
    }
}

enum Created {
    Json(Value),
    Stream {
        response: Value,
        fault: Option<Fault>,
        delta_chars: usize,
    },
}

fn create_inner(state: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<Created, ApiFailure> {
    check_auth(headers, state.api_key.as_deref())?;
    state.record(&Method::POST, "/v1/responses", headers, body);
    let request: CreateResponse = serde_json::from_slice(body).map_err(|e| parse_failure(&e))?;
    if request.model.trim().is_empty() {
        return Err(ApiFailure::invalid(
            "Missing required parameter: 'model'.",
            Some("model"),
            Some("missing_required_parameter"),
        ));
    }
    let mut context = state.context_of(request.previous_response_id())?;
    context.extend(input_items(request.input.as_ref()));
    check_context(&context, &lock(&state.issued))?;
    let body_text = String::from_utf8_lossy(body);
    let view = RequestView {
        endpoint: Endpoint::Responses,
        body_text: &body_text,
        items: &context,
        stream: request.is_stream(),
        previous_response: request.previous_response_id().is_some(),
    };
    let (reply, fault) = state
        .pick(&view)
        .unwrap_or((Reply::Echo { echo: true }, None));
    let (items, status, delta_chars) = match reply {
        Reply::Error { error } => return Err(error_reply(&error)),
        Reply::Items {
            items,
            status,
            delta_chars,
        } => (items, status, delta_chars),
        Reply::Echo { .. } => (echo_items(&context), "completed".to_owned(), None),
    };
    let output: Vec<Value> = items
        .iter()
        .map(|item| finish_item(&render(item, &context)))
        .collect();
    let output_tokens = tokens(&Value::Array(output.clone()).to_string());
    let usage = Usage::new(tokens(&body_text), output_tokens);
    let id = new_id("resp");
    let response = response_object(&id, &request, &status, output.clone(), Some(usage));
    let output_items: Vec<Item> = output
        .iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .collect();
    {
        let mut issued = lock(&state.issued);
        for item in &output_items {
            match item {
                Item::Program(p) => {
                    issued
                        .programs
                        .insert(p.call_id.clone(), p.fingerprint.clone());
                }
                Item::Compaction(c) => {
                    issued.compactions.insert(c.encrypted_content.clone());
                }
                _ => {}
            }
        }
    }
    if request.store() {
        context.extend(output_items);
        lock(&state.store).insert(
            id,
            Stored {
                response: response.clone(),
                context,
            },
        );
    }
    if request.is_stream() {
        // A script's own delta size is kept exactly; the default one grows for long texts.
        let delta_chars =
            delta_chars.unwrap_or_else(|| sse::default_delta_chars(&response, state.delta_chars));
        Ok(Created::Stream {
            response,
            fault,
            delta_chars,
        })
    } else {
        Ok(Created::Json(response))
    }
}

fn stream_body(
    state: &Arc<AppState>,
    response: &Value,
    fault: Option<Fault>,
    delta_chars: usize,
) -> Response {
    let events = sse::events(response, delta_chars);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let gate = fault
        .as_ref()
        .and_then(|f| f.gate.as_deref())
        .map(|name| state.gate(name));
    tokio::spawn(async move {
        for (index, event) in events.iter().enumerate() {
            if let Some(f) = &fault
                && f.after_events == index
            {
                match f.kind {
                    FaultKind::Cut => {
                        // Half of the next frame, then the body ends: the client sees a
                        // stream cut inside an event (an abort could drop buffered frames).
                        let frame = sse::frame(event);
                        let half = frame.len() / 2;
                        let cut = (0..=half)
                            .rev()
                            .find(|i| frame.is_char_boundary(*i))
                            .unwrap_or(0);
                        let _ = tx
                            .send(Ok(Bytes::copy_from_slice(&frame.as_bytes()[..cut])))
                            .await;
                        return;
                    }
                    FaultKind::Stall => {
                        tx.closed().await;
                        return;
                    }
                    FaultKind::Gate => {
                        if let Some(gate) = &gate {
                            gate.notified().await;
                        }
                    }
                    FaultKind::ErrorEvent => {
                        let nested = f.shape.as_deref() != Some("flat");
                        let frame = sse::frame(&sse::error_event(index as u64, nested));
                        let _ = tx.send(Ok(Bytes::from(frame))).await;
                        return;
                    }
                }
            }
            if tx.send(Ok(Bytes::from(sse::frame(event)))).await.is_err() {
                return;
            }
        }
    });
    base_headers(Response::builder())
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
        .unwrap_or_default()
}

async fn compact(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> Response {
    match compact_inner(&state, &headers, &body) {
        Ok(value) => json_response(200, &value),
        Err(f) => failure(&f),
    }
}

fn compact_inner(state: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiFailure> {
    check_auth(headers, state.api_key.as_deref())?;
    state.record(&Method::POST, "/v1/responses/compact", headers, body);
    let request: CompactRequest = serde_json::from_slice(body).map_err(|e| parse_failure(&e))?;
    if request.model.trim().is_empty() {
        return Err(ApiFailure::invalid(
            "Missing required parameter: 'model'.",
            Some("model"),
            Some("missing_required_parameter"),
        ));
    }
    let previous = request
        .previous_response_id
        .as_ref()
        .and_then(|v| v.as_deref());
    let mut context = state.context_of(previous)?;
    context.extend(input_items(request.input.as_ref()));
    check_context(&context, &lock(&state.issued))?;
    let body_text = String::from_utf8_lossy(body);
    let view = RequestView {
        endpoint: Endpoint::Compact,
        body_text: &body_text,
        items: &context,
        stream: false,
        previous_response: previous.is_some(),
    };
    let scripted = state.pick(&view);
    let output: Vec<Value> = match scripted {
        Some((Reply::Error { error }, _)) => return Err(error_reply(&error)),
        Some((Reply::Items { items, .. }, _)) => items
            .iter()
            .map(|i| finish_item(&render(i, &context)))
            .collect(),
        Some((Reply::Echo { .. }, _)) | None => {
            let mut out: Vec<Value> = context
                .iter()
                .filter_map(|item| match item {
                    Item::Message(m) if m.role == "user" => Some(json!({
                        "id": new_id("msg"), "type": "message", "status": "completed", "role": "user",
                        "content": [{"type": "input_text", "text": m.text()}]})),
                    _ => None,
                })
                .collect();
            out.push(json!({"id": new_id("cmp"), "type": "compaction",
                            "encrypted_content": format!("cmp-mock-{}", uuid::Uuid::new_v4().simple())}));
            out
        }
    };
    {
        let mut issued = lock(&state.issued);
        for item in &output {
            if item.get("type").and_then(Value::as_str) == Some("compaction")
                && let Some(content) = item.get("encrypted_content").and_then(Value::as_str)
            {
                issued.compactions.insert(content.to_owned());
            }
        }
    }
    let usage = Usage::new(
        tokens(&body_text),
        tokens(&Value::Array(output.clone()).to_string()),
    );
    Ok(json!({
        "id": new_id("resp"),
        "object": "response.compaction",
        "created_at": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "output": output,
        "usage": usage,
    }))
}

async fn retrieve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    if let Err(f) = check_auth(&headers, state.api_key.as_deref()) {
        return failure(&f);
    }
    // An id that is not UTF-8 once decoded: the API's JSON error, not axum's plain text.
    let id = match id {
        Ok(Path(id)) => id,
        Err(rejection) => {
            return failure(&request_error(
                rejection.status().as_u16(),
                format!("Invalid URL: {}", rejection.body_text()),
            ));
        }
    };
    state.record(&Method::GET, &format!("/v1/responses/{id}"), &headers, &[]);
    let stored = lock(&state.store).get(&id).map(|s| s.response.clone());
    match stored {
        Some(response) => json_response(200, &response),
        None => failure(&ApiFailure {
            status: 404,
            message: format!("Response with id '{id}' not found."),
            kind: "invalid_request_error".into(),
            code: None,
            param: None,
            headers: Vec::new(),
        }),
    }
}

/// `GET /__mock/requests`: the recorded requests as JSON, for out-of-process tests (interop).
/// Under `--require-key` it needs the key like every other route.
async fn recorded_requests(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(f) = check_auth(&headers, state.api_key.as_deref()) {
        return failure(&f);
    }
    let list: Vec<Value> = lock(&state.recorded)
        .iter()
        .map(|r| {
            let headers: serde_json::Map<String, Value> = r
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            json!({"method": r.method, "path": r.path, "headers": headers, "body": r.body})
        })
        .collect();
    json_response(200, &Value::Array(list))
}
