//! A WebSocket client of the emulator for the suites: `GET /v1/responses` upgraded, with
//! the test key.

use agent_responses_mock::MockServer;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket connection to `server`'s `/v1/responses` with key `sk-test`.
pub async fn connect(server: &MockServer) -> Socket {
    let mut request = format!("ws://{}/v1/responses", server.addr())
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", "Bearer sk-test".parse().unwrap());
    let (socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    socket
}
