-- The binding a probe was asked to use (`JSONRPC`, `HTTP+JSON`, `GRPC`); null when the
-- requester left the choice to cardgate (the preferred binding the card offers).
alter table probe_runs add column binding text;
