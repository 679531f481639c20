-- API keys. Only a sha256 of each key is stored; the key itself is shown once, at creation.
create table api_keys (
    id uuid primary key,
    name text not null,
    -- `admin`, `reporter` or `reader`.
    role text not null,
    -- The first characters of the key, to tell keys apart in listings.
    prefix text not null,
    key_hash text not null unique,
    created_at timestamptz not null,
    -- Who created it: `key:<name>`, `admin-token` or `cli`.
    created_by text not null,
    revoked_at timestamptz
);
