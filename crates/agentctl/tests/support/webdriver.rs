//! A small W3C WebDriver client for the browser tests: Debian's `chromedriver` driving
//! headless `chromium`, spoken to over HTTP with reqwest (the protocol is a handful of
//! JSON routes; a client crate would bring its own HTTP and TLS stacks for them).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The key W3C WebDriver names an element reference by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where the browser and its driver are, if installed.
pub fn installed() -> Option<(String, String)> {
    let find = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("/usr/bin/{n}"))
            .find(|p| std::path::Path::new(p).exists())
    };
    Some((
        find(&["chromium", "chromium-browser"])?,
        find(&["chromedriver"])?,
    ))
}

/// [`installed`], for a test: when they are missing the test is skipped, saying so, except
/// in CI (`CI=true`), which installs them (`.ci/chromium.sh`): there it fails.
pub fn installed_or_skip() -> Option<(String, String)> {
    let found = installed();
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but chromium/chromedriver are missing: .ci/chromium.sh installs them");
        }
        eprintln!("SKIPPED: the browser test (install chromium and chromium-driver)");
    }
    found
}

/// A `chromedriver` process and one browser session of it.
pub struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
    base: String,
}

impl Drop for Browser {
    /// Kills the driver's whole process group: the browser it started too (killing the
    /// driver alone leaves the browser running).
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// An element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// Starts `chromedriver` and a headless `chromium` session (1366x900, as a laptop).
    pub async fn start(chromium: &str, chromedriver: &str) -> Browser {
        Browser::start_in(chromium, chromedriver, None).await
    }

    /// [`Browser::start`] with its profile (cookies, history, disk cache) in `profile`,
    /// to read after [`Browser::quit`]; else the driver's own temporary one.
    pub async fn start_in(
        chromium: &str,
        chromedriver: &str,
        profile: Option<&std::path::Path>,
    ) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        use std::os::unix::process::CommandExt as _;
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while http.get(format!("{base}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1366,900".into(),
            "--no-first-run".into(),
            "--disable-extensions".into(),
        ];
        if let Some(profile) = profile {
            args.push(format!("--user-data-dir={}", profile.display()));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args}
        }}});
        let mut browser = Browser {
            driver,
            http,
            session: String::new(),
            base,
        };
        let created = browser.send("POST", "/session", Some(caps)).await;
        browser.session = created["sessionId"].as_str().unwrap().to_string();
        browser
    }

    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or_else(|| json!({}))),
        };
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let value: Value = resp.json().await.unwrap();
        assert!(status.is_success(), "webdriver {method} {path}: {value}");
        value["value"].clone()
    }

    async fn session(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.send(method, &format!("/session/{}{path}", self.session), body)
            .await
    }

    /// Ends the session: the driver closes the browser.
    pub async fn quit(&self) {
        let url = format!("{}/session/{}", self.base, self.session);
        let _ = self.http.delete(url).send().await;
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.session("POST", "/url", Some(json!({"url": url})))
            .await;
    }

    /// The page's HTML now.
    pub async fn source(&self) -> String {
        self.session("GET", "/source", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The elements matching `css` now (maybe none).
    pub async fn all(&self, css: &str) -> Vec<Element> {
        let found = self
            .session(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                Element(
                    e[ELEMENT]
                        .as_str()
                        .unwrap_or_else(|| panic!("{e}"))
                        .to_string(),
                )
            })
            .collect()
    }

    /// Waits up to `within` for an element matching `css` whose text contains `text`.
    pub async fn wait_for(&self, css: &str, text: &str, within: Duration) -> Element {
        let deadline = Instant::now() + within;
        loop {
            for el in self.all(css).await {
                // An element replaced meanwhile is simply looked for again.
                if let Some(t) = self.try_text(&el).await
                    && t.contains(text)
                {
                    return el;
                }
            }
            if Instant::now() > deadline {
                panic!("no `{css}` containing {text:?} within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn try_text(&self, el: &Element) -> Option<String> {
        let url = format!(
            "{}/session/{}/element/{}/text",
            self.base, self.session, el.0
        );
        let resp = self.http.get(url).send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let v: Value = resp.json().await.ok()?;
        v["value"].as_str().map(str::to_string)
    }

    /// Clicks `el`.
    pub async fn click(&self, el: &Element) {
        self.session("POST", &format!("/element/{}/click", el.0), None)
            .await;
    }

    /// Types `text` into `el`.
    pub async fn type_into(&self, el: &Element, text: &str) {
        self.session(
            "POST",
            &format!("/element/{}/value", el.0),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Runs `script` in the page with `args`; returns its value.
    pub async fn execute(&self, script: &str, args: Value) -> Value {
        self.session(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Forgets every cookie of the page's site.
    pub async fn delete_cookies(&self) {
        self.session("DELETE", "/cookie", None).await;
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let b64 = self.session("GET", "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap_or_default())
            .unwrap_or_default()
    }
}
