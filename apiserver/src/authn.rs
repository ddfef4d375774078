//! Who sends a request: users of a static token file (kube-apiserver's `--token-auth-file`),
//! ServiceAccount tokens this server issued, anonymous requests, and the identity an
//! `Impersonate-*` request asks for. The authorization of impersonation is the HTTP layer's,
//! through [`crate::rbac`].

use serde::Serialize;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

/// The user of anonymous requests.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The group of anonymous requests.
pub(crate) const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group of every authenticated user.
pub(crate) const AUTHENTICATED_GROUP: &str = "system:authenticated";
const SA_PREFIX: &str = "system:serviceaccount:";

/// Errors of authentication configuration and of `Impersonate-*` headers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthnError {
    /// A line of a token file is not `token,user,uid[,"group1,group2"]`.
    #[error("token file line {line}: {why}")]
    TokenFile {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// `Impersonate-Group` (or `-Uid`, `-Extra-`) without `Impersonate-User`.
    #[error("requested {0} without impersonating a user")]
    ImpersonationWithoutUser(String),
    /// A header value that is not text.
    #[error("header {0} is not valid text")]
    BadHeader(String),
    /// A client certificate whose subject cannot be read.
    #[error("client certificate: {0}")]
    Certificate(&'static str),
}

/// The user a client certificate names, as kube-apiserver's x509 authenticator reads it: the
/// subject's common name is the user, each organization a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientCertUser(pub UserInfo);

/// One DER element: tag, contents, and the rest after it.
fn der_element(b: &[u8]) -> Result<(u8, &[u8], &[u8]), AuthnError> {
    let bad = AuthnError::Certificate("malformed DER");
    let (&tag, rest) = b.split_first().ok_or(bad.clone())?;
    let (&first, rest) = rest.split_first().ok_or(bad.clone())?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad);
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(bad);
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The user of an X.509 certificate (DER): subject CN as the name, each O as a group
/// (`x509.CommonNameUserConversion`).
pub(crate) fn x509_user(der: &[u8]) -> Result<UserInfo, AuthnError> {
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    let (_, cert, _) = der_element(der)?;
    let (_, mut tbs, _) = der_element(cert)?;
    // version [0] (optional), serial, signature algorithm, issuer, validity, then subject
    let mut fields = vec![];
    while !tbs.is_empty() && fields.len() < 7 {
        let (tag, body, rest) = der_element(tbs)?;
        fields.push((tag, body));
        tbs = rest;
    }
    let skip = usize::from(fields.first().is_some_and(|(t, _)| *t == 0xa0));
    let (_, mut subject) = *fields
        .get(skip + 4)
        .ok_or(AuthnError::Certificate("no subject"))?;
    let mut user = UserInfo::default();
    while !subject.is_empty() {
        let (_, set, rest) = der_element(subject)?;
        subject = rest;
        let mut set = set;
        while !set.is_empty() {
            let (_, attr, more) = der_element(set)?;
            set = more;
            let (_, oid, value) = der_element(attr)?;
            let (_, text, _) = der_element(value)?;
            let text = String::from_utf8_lossy(text).into_owned();
            if oid == CN {
                user.name = text;
            } else if oid == O {
                user.groups.push(text);
            }
        }
    }
    if user.name.is_empty() {
        return Err(AuthnError::Certificate("no common name in the subject"));
    }
    Ok(user)
}

/// An authenticated identity (`user.Info`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct UserInfo {
    /// User name.
    pub name: String,
    /// UID (may be empty).
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user with groups (`system:authenticated` is added when authenticated).
    pub fn new(name: &str, groups: &[&str]) -> Self {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    /// The identity of ServiceAccount `ns/name`: `system:serviceaccount:<ns>:<name>` in
    /// `system:serviceaccounts` and `system:serviceaccounts:<ns>`.
    pub fn service_account(ns: &str, name: &str) -> Self {
        UserInfo {
            name: format!("{SA_PREFIX}{ns}:{name}"),
            uid: String::new(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
            ],
        }
    }

    /// The anonymous user.
    pub(crate) fn anonymous() -> Self {
        UserInfo::new(ANONYMOUS_USER, &[UNAUTHENTICATED_GROUP])
    }

    /// With `system:authenticated` added unless present or anonymous (as the authenticator
    /// chain and the impersonation filter do).
    pub(crate) fn authenticated(mut self) -> Self {
        if self.name != ANONYMOUS_USER && !self.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.into());
        }
        self
    }

    /// `Some((ns, name))` when this is a ServiceAccount's user name.
    pub(crate) fn service_account_of(name: &str) -> Option<(&str, &str)> {
        name.strip_prefix(SA_PREFIX)?.split_once(':')
    }
}

/// Authentication and authorization of a server (opt-in: without it every request is
/// allowed, as before). Its `Debug` never prints a token.
#[derive(Clone)]
pub struct AuthConfig {
    /// Static bearer tokens and their users (`system:authenticated` is added to each).
    pub tokens: Vec<(String, UserInfo)>,
    /// Requests without credentials are `system:anonymous` (as kube-apiserver's default
    /// `--anonymous-auth=true`); when false they get 401.
    pub anonymous: bool,
    /// The OwnerReferencesPermissionEnforcement admission plugin: setting an ownerReference
    /// needs `delete` on the object, setting `blockOwnerDeletion` needs `update` on the
    /// owner's `finalizers`. Default true.
    pub owner_references_permission_enforcement: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens: vec![],
            anonymous: true,
            owner_references_permission_enforcement: true,
        }
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let users: Vec<&str> = self.tokens.iter().map(|(_, u)| u.name.as_str()).collect();
        f.debug_struct("AuthConfig")
            .field("token_users", &users)
            .field("anonymous", &self.anonymous)
            .field(
                "owner_references_permission_enforcement",
                &self.owner_references_permission_enforcement,
            )
            .finish()
    }
}

impl AuthConfig {
    /// Add the users of a token file: one `token,user,uid[,"group1,group2"]` per line, as
    /// kube-apiserver's `--token-auth-file` (blank lines and `#` comments skipped).
    pub fn with_token_file(mut self, text: &str) -> Result<Self, AuthnError> {
        self.tokens.extend(parse_token_file(text)?);
        Ok(self)
    }

    /// Add one token.
    pub fn with_token(mut self, token: &str, user: UserInfo) -> Self {
        self.tokens.push((token.into(), user));
        self
    }
}

/// Split line `number` of a token file into fields (double quotes group, `""` inside quotes is
/// a quote).
fn csv_fields(line: &str, number: usize) -> Result<Vec<String>, AuthnError> {
    let mut fields = vec![];
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    if quoted {
        return Err(AuthnError::TokenFile {
            line: number,
            why: "unterminated quote".into(),
        });
    }
    fields.push(cur);
    Ok(fields)
}

/// Parse a static token file.
pub fn parse_token_file(text: &str) -> Result<Vec<(String, UserInfo)>, AuthnError> {
    let mut out = vec![];
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |why: String| AuthnError::TokenFile { line: i + 1, why };
        let fields = csv_fields(line, i + 1)?;
        let [token, user, uid, rest @ ..] = fields.as_slice() else {
            return Err(err(format!(
                "{} fields, want at least 3 (token,user,uid)",
                fields.len()
            )));
        };
        if token.is_empty() || user.is_empty() {
            return Err(err("empty token or user".into()));
        }
        let groups = rest
            .first()
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        out.push((
            token.clone(),
            UserInfo {
                name: user.clone(),
                uid: uid.clone(),
                groups,
            },
        ));
    }
    Ok(out)
}

/// A ServiceAccount token this server issued: whose, and the uid of the ServiceAccount it was
/// issued for (a token outlives neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IssuedToken {
    /// Namespace.
    pub ns: String,
    /// ServiceAccount name.
    pub name: String,
    /// The ServiceAccount's uid when issued.
    pub uid: String,
}

/// The authentication state of a server: the configuration and the ServiceAccount tokens
/// issued so far.
pub(crate) struct Authn {
    /// Configuration.
    pub config: AuthConfig,
    static_tokens: HashMap<String, UserInfo>,
    issued: Mutex<HashMap<String, IssuedToken>>,
    random: RandomState,
}

/// What a request's credentials say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Credential {
    /// A static token's user (with `system:authenticated`).
    User(UserInfo),
    /// An issued ServiceAccount token (the caller checks the ServiceAccount still exists).
    ServiceAccount(IssuedToken),
    /// No credentials and anonymous requests allowed.
    Anonymous,
    /// Unknown token, or no credentials and anonymous requests refused: 401.
    Unauthorized,
}

impl Authn {
    /// State for a configuration.
    pub(crate) fn new(config: AuthConfig) -> Self {
        let static_tokens = config
            .tokens
            .iter()
            .map(|(t, u)| (t.clone(), u.clone().authenticated()))
            .collect();
        Authn {
            config,
            static_tokens,
            issued: Mutex::new(HashMap::new()),
            random: RandomState::new(),
        }
    }

    /// Resolve an `Authorization` header value.
    pub(crate) fn credential(&self, authorization: Option<&str>) -> Credential {
        let Some(value) = authorization else {
            return if self.config.anonymous {
                Credential::Anonymous
            } else {
                Credential::Unauthorized
            };
        };
        let Some(token) = value
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Credential::Unauthorized;
        };
        if let Some(u) = self.static_tokens.get(token) {
            return Credential::User(u.clone());
        }
        let issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        match issued.get(token) {
            Some(t) => Credential::ServiceAccount(t.clone()),
            None => Credential::Unauthorized,
        }
    }

    /// Issue a new token for a ServiceAccount (its uid as stored now).
    pub(crate) fn issue(&self, ns: &str, name: &str, uid: &str) -> String {
        let mut issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        let token = random_token(&self.random, "kmeta-sa.", issued.len() as u64);
        issued.insert(
            token.clone(),
            IssuedToken {
                ns: ns.into(),
                name: name.into(),
                uid: uid.into(),
            },
        );
        token
    }
}

/// A token nobody can guess: `prefix` and 256 bits from a randomly keyed hasher.
pub(crate) fn random_token(random: &RandomState, prefix: &str, salt: u64) -> String {
    let mut token = String::from(prefix);
    for i in 0..4u64 {
        let mut h = random.build_hasher();
        h.write_u64(salt);
        h.write_u64(i);
        token.push_str(&format!("{:016x}", h.finish()));
    }
    token
}

/// The identity an `Impersonate-*` request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Impersonation {
    /// `Impersonate-User`.
    pub user: String,
    /// `Impersonate-Group` values.
    pub groups: Vec<String>,
    /// `Impersonate-Uid`.
    pub uid: Option<String>,
}

impl Impersonation {
    /// The impersonation a request's headers ask for, if any.
    pub(crate) fn from_headers(h: &http::HeaderMap) -> Result<Option<Self>, AuthnError> {
        let text = |name: &str, v: &http::HeaderValue| {
            v.to_str()
                .map(str::to_string)
                .map_err(|_| AuthnError::BadHeader(name.into()))
        };
        let user = match h.get("Impersonate-User") {
            Some(v) => Some(text("Impersonate-User", v)?),
            None => None,
        };
        let mut groups = vec![];
        for v in h.get_all("Impersonate-Group") {
            groups.push(text("Impersonate-Group", v)?);
        }
        let uid = match h.get("Impersonate-Uid") {
            Some(v) => Some(text("Impersonate-Uid", v)?),
            None => None,
        };
        let extra = h
            .keys()
            .any(|k| k.as_str().starts_with("impersonate-extra-"));
        let Some(user) = user else {
            if !groups.is_empty() {
                return Err(AuthnError::ImpersonationWithoutUser(format!(
                    "{} group(s)",
                    groups.len()
                )));
            }
            if uid.is_some() || extra {
                return Err(AuthnError::ImpersonationWithoutUser("uid or extra".into()));
            }
            return Ok(None);
        };
        Ok(Some(Impersonation { user, groups, uid }))
    }

    /// The identity after impersonation (`filters.WithImpersonation`): a ServiceAccount
    /// without groups asked for gets its ServiceAccount groups; everyone but
    /// `system:anonymous` is in `system:authenticated`, which is in `system:unauthenticated`.
    pub(crate) fn user_info(&self) -> UserInfo {
        let mut groups = self.groups.clone();
        if groups.is_empty()
            && let Some((ns, name)) = UserInfo::service_account_of(&self.user)
        {
            groups = UserInfo::service_account(ns, name).groups;
        }
        let mut u = UserInfo {
            name: self.user.clone(),
            uid: self.uid.clone().unwrap_or_default(),
            groups,
        };
        if u.name == ANONYMOUS_USER {
            if !u.groups.iter().any(|g| g == UNAUTHENTICATED_GROUP) {
                u.groups.push(UNAUTHENTICATED_GROUP.into());
            }
            u
        } else {
            u = u.authenticated();
            u
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_reads_as_kube_apiservers() {
        let users = parse_token_file(
            "# comment\n\nt1,alice,u1,\"dev,ops\"\nt2,bob,u2\n\"t,3\",carol,u3,admins\n",
        )
        .unwrap();
        assert_eq!(users.len(), 3);
        assert_eq!(users[0].0, "t1");
        assert_eq!(users[0].1.groups, vec!["dev", "ops"]);
        assert_eq!(users[1].1.name, "bob");
        assert!(users[1].1.groups.is_empty());
        assert_eq!(users[2].0, "t,3");
        assert_eq!(users[2].1.groups, vec!["admins"]);
        let e = parse_token_file("ok,a,b\nonly,two\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "token file line 2: 2 fields, want at least 3 (token,user,uid)"
        );
    }

    #[test]
    fn credentials_resolve_to_users_service_accounts_anonymous_or_401() {
        let a =
            Authn::new(AuthConfig::default().with_token("t1", UserInfo::new("alice", &["dev"])));
        assert_eq!(
            a.credential(Some("Bearer t1")),
            Credential::User(UserInfo::new("alice", &["dev", AUTHENTICATED_GROUP]))
        );
        assert_eq!(a.credential(Some("Bearer nope")), Credential::Unauthorized);
        assert_eq!(a.credential(Some("Basic eDp5")), Credential::Unauthorized);
        assert_eq!(a.credential(None), Credential::Anonymous);
        let t = a.issue("ns", "robot", "uid-1");
        let t2 = a.issue("ns", "robot", "uid-1");
        assert_ne!(t, t2, "each issued token is new");
        assert_eq!(
            a.credential(Some(&format!("Bearer {t}"))),
            Credential::ServiceAccount(IssuedToken {
                ns: "ns".into(),
                name: "robot".into(),
                uid: "uid-1".into()
            })
        );
        let closed = Authn::new(AuthConfig {
            anonymous: false,
            ..Default::default()
        });
        assert_eq!(closed.credential(None), Credential::Unauthorized);
        assert!(
            !format!("{:?}", a.config).contains("t1"),
            "Debug hides tokens"
        );
    }

    #[test]
    fn a_certificate_subject_names_the_user_and_its_groups() {
        let mut params =
            rcgen::CertificateParams::new(vec!["ignored.example".to_string()]).unwrap();
        // rcgen writes one attribute per type: a second O under its raw OID
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "dev");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "carol");
        params.distinguished_name.push(
            rcgen::DnType::CustomDnType(vec![2, 5, 4, 10]),
            "system:masters",
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let user = x509_user(cert.der()).unwrap();
        assert_eq!(user.name, "carol");
        assert_eq!(user.groups, vec!["dev", "system:masters"]);
        let mut anonymous = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        anonymous.distinguished_name = rcgen::DistinguishedName::new();
        let cert = anonymous.self_signed(&key).unwrap();
        assert!(x509_user(cert.der()).is_err(), "no CN, no user");
        assert!(x509_user(&[0x30, 0x05, 0x01]).is_err());
    }

    #[test]
    fn impersonation_gives_service_accounts_their_groups() {
        let mut h = http::HeaderMap::new();
        h.insert(
            "Impersonate-User",
            "system:serviceaccount:ns:robot".parse().unwrap(),
        );
        let i = Impersonation::from_headers(&h).unwrap().unwrap();
        assert_eq!(
            i.user_info().groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                AUTHENTICATED_GROUP
            ]
        );
        h.append("Impersonate-Group", "g1".parse().unwrap());
        let i = Impersonation::from_headers(&h).unwrap().unwrap();
        assert_eq!(i.user_info().groups, vec!["g1", AUTHENTICATED_GROUP]);
        let mut only_group = http::HeaderMap::new();
        only_group.insert("Impersonate-Group", "g1".parse().unwrap());
        assert!(Impersonation::from_headers(&only_group).is_err());
        assert_eq!(
            Impersonation::from_headers(&http::HeaderMap::new()),
            Ok(None)
        );
    }
}
