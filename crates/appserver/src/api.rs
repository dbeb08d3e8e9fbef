//! Typed v2 calls on [`AppServerClient`].

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::AppServerClient;
use crate::error::AppServerError;
use crate::protocol::{
    ClientInfo, InitializeResponse, ThreadStartParams, ThreadStartResponse, TurnInterruptParams,
    TurnStartParams, TurnStartResponse, TurnSteerParams, TurnSteerResponse, UserInput,
};

impl AppServerClient {
    /// The handshake: `initialize`, then the `initialized` notification. Any other request
    /// before this gets `-32600 "Not initialized"` from the server.
    ///
    /// # Cancel safety
    ///
    /// As for [`call`](Self::call) and [`notify`](Self::notify): a dropped future may leave
    /// `initialize` sent (and answered by the server) without the `initialized` notification.
    pub async fn initialize(
        &self,
        client_info: ClientInfo,
    ) -> Result<InitializeResponse, AppServerError> {
        let method = "initialize";
        let raw = self
            .call(
                method,
                Some(serde_json::json!({ "clientInfo": client_info })),
            )
            .await?;
        let mut keys: Vec<String> = raw
            .as_object()
            .map(|obj| obj.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        let mut response: InitializeResponse = decode(method, raw)?;
        response.keys = keys;
        self.notify("initialized", None).await?;
        Ok(response)
    }

    /// `thread/start`.
    ///
    /// # Cancel safety
    ///
    /// As for [`call`](Self::call): a dropped future may leave a thread started on the
    /// server whose id the caller never learns.
    pub async fn thread_start(
        &self,
        params: &ThreadStartParams,
    ) -> Result<ThreadStartResponse, AppServerError> {
        self.typed_call("thread/start", params).await
    }

    /// `turn/start`: returns as soon as the turn is accepted (`status: inProgress`); the
    /// turn's progress arrives as notifications, ending with `turn/completed`.
    ///
    /// # Cancel safety
    ///
    /// As for [`call`](Self::call): a dropped future may leave the turn started and running;
    /// its response is lost, but its notifications still arrive on [`Events`](crate::Events).
    pub async fn turn_start(
        &self,
        params: &TurnStartParams,
    ) -> Result<TurnStartResponse, AppServerError> {
        self.typed_call("turn/start", params).await
    }

    /// `turn/steer`: adds input to the running turn, only if it is still `expected_turn_id`.
    ///
    /// # Cancel safety
    ///
    /// As for [`call`](Self::call): a dropped future may leave the input added to the turn,
    /// and the caller does not learn whether it was.
    pub async fn turn_steer(
        &self,
        thread_id: &str,
        expected_turn_id: &str,
        input: Vec<UserInput>,
    ) -> Result<TurnSteerResponse, AppServerError> {
        let params = TurnSteerParams {
            thread_id: thread_id.to_owned(),
            expected_turn_id: expected_turn_id.to_owned(),
            input,
        };
        self.typed_call("turn/steer", &params).await
    }

    /// `turn/interrupt`: the turn then ends with `turn/completed` and status `interrupted`.
    ///
    /// # Cancel safety
    ///
    /// As for [`call`](Self::call): a dropped future may leave the interrupt delivered; if so,
    /// the turn's `turn/completed` still arrives on [`Events`](crate::Events).
    pub async fn turn_interrupt(
        &self,
        thread_id: &str,
        turn_id: &str,
    ) -> Result<(), AppServerError> {
        let params = TurnInterruptParams {
            thread_id: thread_id.to_owned(),
            turn_id: turn_id.to_owned(),
        };
        let _: Value = self.typed_call("turn/interrupt", &params).await?;
        Ok(())
    }

    async fn typed_call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, AppServerError> {
        let params = serde_json::to_value(params).map_err(|source| AppServerError::Encode {
            method: method.to_owned(),
            source,
        })?;
        let raw = self.call(method, Some(params)).await?;
        decode(method, raw)
    }
}

fn decode<R: DeserializeOwned>(method: &str, raw: Value) -> Result<R, AppServerError> {
    serde_json::from_value(raw).map_err(|source| AppServerError::UnexpectedResult {
        method: method.to_owned(),
        source,
    })
}
