//! The Kubernetes client of every pav component: kube's default stack
//! behind a client-side rate limit.
//!
//! The limit is a token bucket with client-go's meaning of
//! `--kube-api-qps` and `--kube-api-burst`: up to `burst` requests at once,
//! then `qps` per second. It sits in front of kube's request buffer, so
//! every clone of one [`kube::Client`] shares it. A watch counts once, when
//! it is opened.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use kube::Client;
use kube::client::ClientBuilder;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// Default of `--kube-api-qps`.
pub const DEFAULT_QPS: f64 = 50.0;
/// Default of `--kube-api-burst`.
pub const DEFAULT_BURST: u32 = 100;

/// Client-side API rate limit flags, shared by every component.
#[derive(Debug, Clone, Copy, PartialEq, clap::Args)]
pub struct ApiLimits {
    /// Requests per second this process may send to the API server, on
    /// average.
    #[arg(long = "kube-api-qps", env = "PAV_KUBE_API_QPS", default_value_t = DEFAULT_QPS,
          value_parser = positive)]
    pub qps: f64,
    /// Requests this process may send at once before `--kube-api-qps`
    /// applies.
    #[arg(long = "kube-api-burst", env = "PAV_KUBE_API_BURST", default_value_t = DEFAULT_BURST,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,
}

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
        }
    }
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(qps) if qps.is_finite() && qps > 0.0 => Ok(qps),
        _ => Err(format!(
            "{text:?} is not a positive number of requests per second"
        )),
    }
}

/// A client for the cluster of the kubeconfig or service account, limited
/// to `limits`, sending user agent `pav/<version> (<component>)` so the API
/// server's audit log tells pav's components apart.
pub async fn client(limits: ApiLimits, component: &str) -> kube::Result<Client> {
    let mut config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let agent = format!("pav/{} ({component})", env!("CARGO_PKG_VERSION"));
    if let Ok(agent) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&RateLimitLayer::new(limits))
        .build())
}

/// A token bucket: `burst` tokens, refilled at `qps` per second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(limits: ApiLimits) -> Self {
        Self {
            qps: limits.qps,
            burst: f64::from(limits.burst),
            tokens: f64::from(limits.burst),
            refilled: Instant::now(),
        }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// Wraps a service in a [`RateLimited`] one.
#[derive(Debug, Clone, Copy)]
pub struct RateLimitLayer {
    limits: ApiLimits,
}

impl RateLimitLayer {
    /// A layer limiting to `limits`.
    pub fn new(limits: ApiLimits) -> Self {
        Self { limits }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: TokenBucket::new(self.limits),
            permitted: false,
            waiting: None,
        }
    }
}

/// A service that is ready only when its [`TokenBucket`] gives a token.
///
/// One instance must serve every request for the limit to hold: kube's
/// client drives its service from one buffer task, so it does.
pub struct RateLimited<S> {
    inner: S,
    bucket: TokenBucket,
    permitted: bool,
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for RateLimited<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimited")
            .field("inner", &self.inner)
            .field("bucket", &self.bucket)
            .finish()
    }
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // The token is taken once per request, however often the caller
        // polls before calling.
        while !self.permitted {
            if let Some(waiting) = self.waiting.as_mut() {
                ready!(waiting.as_mut().poll(cx));
                self.waiting = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.permitted = true,
                Err(wait) => self.waiting = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.permitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt as _;

    fn limits(qps: f64, burst: u32) -> ApiLimits {
        ApiLimits { qps, burst }
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_gives_a_burst_then_the_rate() {
        let mut bucket = TokenBucket::new(limits(10.0, 3));
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(bucket.take(start), Ok(()));
        }
        let wait = bucket.take(start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        assert_eq!(bucket.take(start + Duration::from_millis(100)), Ok(()));
        // A long idle time refills only up to the burst.
        let later = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(bucket.take(later), Ok(()));
        }
        assert!(bucket.take(later).is_err());
    }

    /// Sends `n` requests one after another through a limited service and
    /// returns when each was let through, relative to the first.
    async fn send(limits: ApiLimits, n: usize) -> Vec<Duration> {
        let start = Instant::now();
        let inner = tower::service_fn(move |()| async move {
            Ok::<_, std::convert::Infallible>(start.elapsed())
        });
        let mut service = RateLimitLayer::new(limits).layer(inner);
        let mut times = Vec::new();
        for _ in 0..n {
            let ready = service.ready().await.unwrap();
            times.push(ready.call(()).await.unwrap());
        }
        times
    }

    #[tokio::test(start_paused = true)]
    async fn service_never_exceeds_qps_after_the_burst() {
        let times = send(limits(20.0, 5), 65).await;
        assert!(times[..5].iter().all(|t| t.is_zero()), "{times:?}");
        // 60 requests after the burst need 3 s at 20 per second.
        let last = times[64].as_secs_f64();
        assert!((2.99..3.01).contains(&last), "last request at {last}s");
        // No window of one second holds more than qps + burst requests,
        // and none after the burst more than qps (+1 for the edge).
        for (i, t) in times.iter().enumerate() {
            let window = times[i..]
                .iter()
                .take_while(|u| u.saturating_sub(*t) < Duration::from_secs(1))
                .count();
            assert!(window <= 25, "{window} requests within 1s of {t:?}");
            if *t >= Duration::from_millis(250) {
                assert!(window <= 21, "{window} requests within 1s of {t:?}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn polling_twice_takes_one_token() {
        let inner = tower::service_fn(|()| async { Ok::<_, std::convert::Infallible>(()) });
        let mut service = RateLimitLayer::new(limits(1.0, 2)).layer(inner);
        service.ready().await.unwrap();
        service.ready().await.unwrap();
        service.call(()).await.unwrap();
        // The second token is still there.
        let start = Instant::now();
        service.ready().await.unwrap().call(()).await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
        service.ready().await.unwrap().call(()).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[test]
    fn flags_refuse_nonsense() {
        assert!(positive("0").is_err());
        assert!(positive("-1").is_err());
        assert!(positive("NaN").is_err());
        assert!(positive("inf").is_err());
        assert_eq!(positive("2.5"), Ok(2.5));
    }
}
