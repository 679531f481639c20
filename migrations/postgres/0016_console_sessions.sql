-- Operator console sessions (src/console/session.rs). The cookie holds a random session id;
-- only its sha256 is stored, beside the sha256 of the API key that signed in (as api_keys
-- holds it), so a revoked key ends its sessions at their next request. Rows past
-- expires_at are dead and deleted by later sign-ins.
create table console_sessions (
    id_hash text primary key,
    key_hash text not null,
    created_at timestamptz not null,
    expires_at timestamptz not null
);

create index console_sessions_by_expiry on console_sessions (expires_at);
