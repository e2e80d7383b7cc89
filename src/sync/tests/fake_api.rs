//! An in-memory Kubernetes API for orchestration tests: a `kube::Client` over a tower service
//! that stores objects by path, answers GET, label-selected LIST, POST, PUT, PATCH (JSON merge)
//! and DELETE with the preconditions and Status bodies the API server uses (the Statuses are the
//! ones captured in `tests/data`), logs every request, and lets a test step in before a request
//! is answered (to change the store first: a race; or to answer it itself: a fault).

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{Arc, Mutex},
};

use axum::http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use crate::selector::Selector;

/// Where an object lives: resource (plural), namespace (none: cluster-scoped), name.
pub type Key = (String, Option<String>, String);

/// A request as the fake saw it.
#[derive(Clone, Debug)]
pub struct Logged {
    pub method: Method,
    pub resource: String,
    pub namespace: Option<String>,
    /// None for a collection (LIST, POST).
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub query: String,
    pub body: Value,
}

impl Logged {
    /// `VERB resource ns/name`, for assertions and messages.
    pub fn line(&self) -> String {
        let verb = match (&self.method, &self.name) {
            (&Method::GET, None) => "LIST",
            (m, _) => m.as_str(),
        };
        let sub = self
            .subresource
            .as_deref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        format!(
            "{verb} {}{sub} {}/{}",
            self.resource,
            self.namespace.as_deref().unwrap_or("-"),
            self.name.as_deref().unwrap_or("*")
        )
    }
}

/// What a hook does with a request it matched.
pub enum Step {
    /// Answer normally (the hook may have changed the store).
    Continue,
    /// Answer with this status code and body instead.
    Answer(u16, Value),
}

type Hook = Box<dyn FnMut(&Logged, &mut Store) -> Step + Send>;

/// The stored objects and the resourceVersion counter.
#[derive(Default)]
pub struct Store {
    objects: BTreeMap<Key, Value>,
    version: u64,
}

impl Store {
    /// Stores `object` under `resource` (an update when the name is taken: the uid stays) with
    /// a new resourceVersion, giving it a uid if it is new; returns that version.
    pub fn put(&mut self, resource: &str, mut object: Value) -> String {
        self.version += 1;
        let rv = self.version.to_string();
        let meta = &mut object["metadata"];
        let key = (
            resource.to_string(),
            meta.get("namespace")
                .and_then(Value::as_str)
                .map(str::to_string),
            meta["name"].as_str().expect("metadata.name").to_string(),
        );
        let before = self.objects.get(&key).map(|o| o["metadata"].clone());
        meta["resourceVersion"] = rv.clone().into();
        for (field, new) in [
            ("uid", format!("uid-{}", self.version)),
            ("creationTimestamp", "2026-11-22T00:00:00Z".to_string()),
        ] {
            let kept = before.as_ref().and_then(|b| b.get(field)).cloned();
            meta[field] = kept.unwrap_or_else(|| new.into());
        }
        self.objects.insert(key, object);
        rv
    }

    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<&Value> {
        self.objects.get(&(
            resource.to_string(),
            namespace.map(str::to_string),
            name.to_string(),
        ))
    }

    /// Deletes an object (as someone else would, by hand).
    pub fn remove(&mut self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.take(&(
            resource.to_string(),
            namespace.map(str::to_string),
            name.to_string(),
        ))
    }

    fn take(&mut self, key: &Key) -> Option<Value> {
        self.objects.remove(key)
    }
}

/// The fake API server; clone it to keep a handle after building the client.
#[derive(Clone, Default)]
pub struct FakeApi {
    store: Arc<Mutex<Store>>,
    log: Arc<Mutex<Vec<Logged>>>,
    hooks: Arc<Mutex<Vec<Hook>>>,
}

impl FakeApi {
    /// A `kube::Client` whose requests this fake answers.
    pub fn client(&self) -> kube::Client {
        let fake = self.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let fake = fake.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let (code, answer) = fake.answer(&parts.method, &parts.uri, &bytes);
                Ok::<_, Infallible>(
                    Response::builder()
                        .status(StatusCode::from_u16(code).unwrap())
                        .header("content-type", "application/json")
                        .body(Full::new(bytes::Bytes::from(answer.to_string())))
                        .unwrap(),
                )
            }
        });
        kube::Client::new(service, "default")
    }

    /// Runs `f` on the store (to set up a scene or inspect it).
    pub fn store<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        f(&mut self.store.lock().unwrap())
    }

    /// Steps in before every request; hooks run in the order they were added.
    pub fn hook(&self, f: impl FnMut(&Logged, &mut Store) -> Step + Send + 'static) {
        self.hooks.lock().unwrap().push(Box::new(f));
    }

    /// Every request so far, as `VERB resource ns/name` lines.
    pub fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().iter().map(Logged::line).collect()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }

    fn answer(&self, method: &Method, uri: &axum::http::Uri, body: &[u8]) -> (u16, Value) {
        let Some(mut req) = parse_path(uri.path()) else {
            return (404, status("not-found", "?"));
        };
        req.method = method.clone();
        req.query = uri.query().unwrap_or_default().to_string();
        req.body = serde_json::from_slice(body).unwrap_or(Value::Null);
        self.log.lock().unwrap().push(req.clone());
        let mut store = self.store.lock().unwrap();
        for hook in self.hooks.lock().unwrap().iter_mut() {
            if let Step::Answer(code, body) = hook(&req, &mut store) {
                return (code, body);
            }
        }
        handle(&req, &mut store)
    }
}

/// `/api/v1/...` or `/apis/<group>/<version>/...` into resource, namespace, name, subresource.
fn parse_path(path: &str) -> Option<Logged> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.as_slice() {
        ["api", _, rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => return None,
    };
    let owned = |s: &&str| s.to_string();
    let (resource, namespace, name, sub) = match rest {
        ["namespaces"] => ("namespaces", None, None, None),
        ["namespaces", name] => ("namespaces", None, Some(name), None),
        ["namespaces", ns, res] => (*res, Some(ns), None, None),
        ["namespaces", ns, res, name] => (*res, Some(ns), Some(name), None),
        ["namespaces", ns, res, name, sub] => (*res, Some(ns), Some(name), Some(sub)),
        [res] => (*res, None, None, None),
        [res, name] => (*res, None, Some(name), None),
        [res, name, sub] => (*res, None, Some(name), Some(sub)),
        _ => return None,
    };
    Some(Logged {
        method: Method::GET,
        resource: resource.to_string(),
        namespace: namespace.map(owned),
        name: name.map(owned),
        subresource: sub.map(owned),
        query: String::new(),
        body: Value::Null,
    })
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A Status as the API server returned it (`tests/data/status-<fixture>.json`), naming `name`.
pub fn status(fixture: &str, name: &str) -> Value {
    let path = format!(
        "{}/tests/data/status-{fixture}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut s: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect(&path)).expect("a Status");
    s["details"]["name"] = name.into();
    s
}

fn labels_of(object: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(object["metadata"]["labels"].clone()).unwrap_or_default()
}

fn handle(req: &Logged, store: &mut Store) -> (u16, Value) {
    let name = req.name.clone().unwrap_or_default();
    let key: Key = (req.resource.clone(), req.namespace.clone(), name.clone());
    match (&req.method, &req.name) {
        (&Method::GET, None) => {
            if query_param(&req.query, "watch").as_deref() == Some("true") {
                // No watches here: jobs fall back to reading.
                return (404, status("not-found", &req.resource));
            }
            let selector = query_param(&req.query, "labelSelector").unwrap_or_default();
            let selector = Selector::parse(&selector).expect("a valid selector");
            let items: Vec<Value> = store
                .objects
                .iter()
                .filter(|((res, ns, _), o)| {
                    res == &req.resource
                        && (req.namespace.is_none() || ns == &req.namespace)
                        && selector.matches(&labels_of(o))
                })
                .map(|(_, o)| o.clone())
                .collect();
            let rv = store.version.to_string();
            (
                200,
                json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}),
            )
        }
        (&Method::GET, Some(_)) => match store.objects.get(&key) {
            Some(o) => (200, o.clone()),
            None => (404, status("not-found", &name)),
        },
        (&Method::POST, None) => {
            let mut object = req.body.clone();
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if let Some(ns) = &req.namespace {
                let terminating = store
                    .get("namespaces", None, ns)
                    .is_some_and(|n| n["metadata"].get("deletionTimestamp").is_some());
                if terminating {
                    return (403, status("namespace-terminating", &name));
                }
                object["metadata"]["namespace"] = ns.clone().into();
            }
            if store.objects.contains_key(&(
                req.resource.clone(),
                req.namespace.clone(),
                name.clone(),
            )) {
                return (409, status("already-exists", &name));
            }
            store.put(&req.resource, object.clone());
            let stored = store
                .get(&req.resource, req.namespace.as_deref(), &name)
                .cloned()
                .unwrap_or_default();
            (201, stored)
        }
        (&Method::PUT, Some(_)) => {
            let Some(current) = store.objects.get(&key) else {
                return (404, status("not-found", &name));
            };
            let want = req.body["metadata"]["resourceVersion"].as_str();
            if want.is_some() && want != current["metadata"]["resourceVersion"].as_str() {
                return (409, status("conflict", &name));
            }
            if current["immutable"] == json!(true)
                && (current.get("data") != req.body.get("data")
                    || req.body["immutable"] != json!(true))
            {
                return (422, status("immutable", &name));
            }
            let mut object = req.body.clone();
            object["metadata"]["uid"] = current["metadata"]["uid"].clone();
            object["metadata"]["namespace"] = current["metadata"]["namespace"].clone();
            store.put(&req.resource, object);
            (200, store.objects[&key].clone())
        }
        (&Method::PATCH, Some(_)) => {
            let Some(current) = store.objects.get(&key).cloned() else {
                return (404, status("not-found", &name));
            };
            let meta = &req.body["metadata"];
            for field in ["resourceVersion", "uid"] {
                if let Some(want) = meta.get(field).and_then(Value::as_str)
                    && Some(want) != current["metadata"][field].as_str()
                {
                    return (409, status("conflict", &name));
                }
            }
            let mut object = current;
            merge(&mut object, &req.body);
            store.put(&req.resource, object);
            (200, store.objects[&key].clone())
        }
        (&Method::DELETE, Some(_)) => {
            let Some(current) = store.objects.get(&key) else {
                return (404, status("not-found", &name));
            };
            let want = req.body["preconditions"]["resourceVersion"].as_str();
            if want.is_some() && want != current["metadata"]["resourceVersion"].as_str() {
                return (409, status("delete-precondition", &name));
            }
            let gone = store.take(&key).unwrap_or_default();
            (200, gone)
        }
        _ => (405, json!({"kind": "Status", "code": 405})),
    }
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let map = target.as_object_mut().unwrap();
    for (k, v) in patch {
        if v.is_null() {
            map.remove(k);
        } else {
            merge(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}
