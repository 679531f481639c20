-- Credentials cardgate presents to a callee, one per security scheme of its card. The secret
-- is sealed (AES-256-GCM, domain::secrets) under the secrets key file and bound to its row; it
-- is never stored in the clear. The fingerprint names it in listings without showing it.
create table callee_credentials (
    callee_id blob not null references callees (id),
    scheme text not null,
    -- `bearer`, `api-key`, `oauth2-client-credentials` or `mtls`.
    kind text not null,
    sealed text not null,
    fingerprint text not null,
    set_at text not null,
    set_by text not null,
    primary key (callee_id, scheme)
);
