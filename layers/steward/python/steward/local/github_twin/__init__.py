"""A local stand-in for GitHub that Steward's tests and local stack run against.

`GitHubTwin` speaks the REST subset Steward uses with bodies shaped as GitHub sends them
(githubkit's models parse them), serves smart-HTTP git through `git http-backend` that
accepts only `Authorization: Basic base64("x-access-token:<token>")` with a live token it
minted for that repository, mints installation tokens from an App JWT (RS256, `iss` = the
App id, `exp` at most 10 minutes ahead), and delivers signed webhooks with fault switches.

REST (root of `twin.url`, as `api.github.com`):

* `POST /app/installations/{id}/access_tokens`, `GET /app/installations[/{id}]`,
  `GET /repos/{o}/{r}/installation`, `GET /app` (its `events` are `twin.app_events`, and only
  those repository events are delivered), `GET /app/hook/config` (`twin.webhook_url`, the
  secret shown as `********` when `twin.webhook_secret` is set), `GET /app/hook/deliveries`
  (every delivery the twin made or lost, newest first, `cursor` paging) (App JWT; the key is
  `twin.use_app_key()`'s)
* `GET /repos/{o}/{r}`, `GET /installation/repositories`, `DELETE /installation/token`,
  `POST|GET /repos/{o}/{r}/pulls`, `GET|PATCH /repos/{o}/{r}/pulls/{n}`,
  `PUT|GET /repos/{o}/{r}/pulls/{n}/merge`, `POST|GET /repos/{o}/{r}/issues/{n}/comments`
  (a pull request's conversation; `since`), `PATCH /repos/{o}/{r}/issues/comments/{id}`, `GET /repos/{o}/{r}/pulls/{n}/reviews`,
  `GET /repos/{o}/{r}/pulls/{n}/reviews/{id}/comments`, `GET /repos/{o}/{r}/pulls/{n}/comments`
  (inline comments; `since`), `GET /repos/{o}/{r}/commits/{ref}/check-runs` (`filter`,
  `check_name`, `status`, `app_id`), `GET /repos/{o}/{r}/commits/{ref}/status` (the combined
  status), `GET /repos/{o}/{r}/collaborators/{login}/permission` (`team-writer` may write with
  no association GitHub shows) (installation token, `token X` or `Bearer X`; `ref` a SHA or a
  branch)

Git: `{url}/{owner}/{repo}.git` (the repository's `clone_url`).

Admin (`/_twin/`, loopback clients only, no auth): `POST repos/{o}/{r}/pulls/{n}/merge|close|reopen`,
`POST repos/{o}/{r}/pulls/{n}/reviews {state, body, comments: [{path, line, body}], login?}`,
`POST repos/{o}/{r}/pulls/{n}/comments {body, login?}`,
`POST repos/{o}/{r}/pulls/{n}/checks {name, conclusion, output?, ref?}`,
`POST repos/{o}/{r}/pulls/{n}/statuses {context, state, description?, ref?, target_url?}`,
`POST repos/{o}/{r}/pulls/{n}/push {login?}`,
`GET repos/{o}/{r}/pulls`, `GET repos/{o}/{r}/pulls/{n}/comments`, `GET deliveries`,
`POST deliveries/{id}/redeliver`, `POST flush`, `POST withhold {"on": bool}`,
`GET|POST faults`, `PATCH app {webhook_url?, webhook_secret?, events?, private_key?}` (the
App's settings: a PEM or "new" for its key), `POST repos`, `POST installations`,
`POST installations/{id}/suspend|unsuspend|repositories`. `admin` has a client for most of
them (the people's acts: `review`, `comment`, `check`, `status`, `push`, `merge`, `close`).

Behaviour that follows GitHub where a simpler fake would not (each can bite a client):

* A token's scope is the installation's repositories intersected with the requested ones,
  and shrinks when a repository leaves the installation; a suspended or deleted
  installation's tokens stop working; tokens last one hour (`expire_token` ends one now).
* `GET .../pulls?head=branch` without the `owner:` part ignores the filter, as GitHub does.
* GET answers carry `ETag` and `Cache-Control: private, max-age=60`, and `If-None-Match`
  gets a 304, so githubkit's HTTP cache (hishel) revalidates as against GitHub.
* `pull_request` events are sent only for repositories of a live, unsuspended installation.
* Webhook bodies are compact JSON; `X-Hub-Signature` (SHA-1) is sent beside
  `X-Hub-Signature-256`, and neither when the secret is empty, as GitHub does.
* Owner names that would shadow the twin's routes (`repos`, `app`, `_twin`, ...) are refused.
* One installation per account, holding only that account's repositories, as on GitHub.
* A review or a comment moves the pull request's `updated_at` (so a conditional listing of
  pull requests is no longer a 304); a check run or a commit status does not.
* REST says a review's `state` in capitals (`CHANGES_REQUESTED`), its webhook in lower case;
  a `status` event has no `action` and writes its times `+00:00`.
* Installations grant what Steward's App asks for: contents and pull requests write, checks
  and statuses read; check runs need checks: read, the combined status statuses: read.

For clients: githubkit caches App JWTs (by App id) and installation tokens (by App id and
installation id) in one process-wide cache by default. Every twin has a new App key, so a
process that starts more than one twin must give each `GitHub` client its own
`cache_strategy=MemCacheStrategy()`, or it presents a JWT signed with an older twin's key.
"""

from steward.local.github_twin.faults import SWITCHES, Faults
from steward.local.github_twin.state import TwinError
from steward.local.github_twin.twin import GitHubTwin, GitRequest
from steward.local.github_twin.webhooks import Delivery

__all__ = ["SWITCHES", "Delivery", "Faults", "GitHubTwin", "GitRequest", "TwinError"]
