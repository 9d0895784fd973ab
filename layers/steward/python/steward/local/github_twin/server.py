"""The twin's HTTP front: REST at the root, git at `/{owner}/{repo}.git/`, admin at `/_twin/`.

HTTP/1.1 with keep-alive, as git and httpx use it. REST answers carry GitHub's headers
(`X-GitHub-Request-Id`, rate-limit headers, `ETag` with `304` on `If-None-Match`, `Link`
for pages), so clients that cache or page (githubkit with hishel) behave as against
GitHub. Fault switches apply to REST calls only, before authentication, as an overloaded
front end would. No access log: request lines and headers can carry credentials.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

from steward.local.github_twin import http_backend, shapes
from steward.local.github_twin.state import TwinError
from steward.local.github_twin.twin import (
    CHECK_CONCLUSIONS,
    REVIEWER_LOGIN,
    STATUS_STATES,
    GitHubTwin,
    GitRequest,
)
from steward.local.http_base import LocalHandler, LocalHttpServer, Refused

_LOG = logging.getLogger(__name__)

Json = Any
_MAX_BODY = 10 * 1024 * 1024
_SEGMENT = r"([^/?#]+)"
_NUMBER = r"([0-9]{1,9})"
_ID = r"([0-9]{1,18})"
_REF = r"(.+?)"  # a SHA or a branch name, which may hold slashes
_GIT = re.compile(
    r"^/([A-Za-z0-9][A-Za-z0-9-]*)/([A-Za-z0-9_.-]+?)\.git(/info/refs|/git-upload-pack|/git-receive-pack)$"
)
_PAGE = re.compile(rf"^/{_SEGMENT}/{_SEGMENT}/pull/{_NUMBER}$")
_SECONDARY_RATE_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
    "If you reach out to GitHub Support for help, please include the request ID {request_id}."
)
_DOCS_RATE = "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
_API_VERSION = "2022-11-28"


@dataclass
class _Request:
    method: str
    path: str
    query: dict[str, str]
    headers: Any
    body: bytes

    @property
    def authorization(self) -> str | None:
        value = self.headers.get("Authorization")
        return value if isinstance(value, str) else None

    def json(self) -> dict[str, Any]:
        if not self.body.strip():
            return {}
        try:
            value = json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            raise TwinError(400, "Problems parsing JSON") from None
        if not isinstance(value, dict):
            raise TwinError(400, "Problems parsing JSON")
        return value


@dataclass
class _Result:
    status: int
    body: Json = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    drop: bool = False  # close the connection without answering


Route = Callable[[GitHubTwin, _Request, tuple[str, ...]], _Result]


def http_server(address: tuple[str, int], twin: GitHubTwin) -> LocalHttpServer[GitHubTwin]:
    """The twin's HTTP server, bound and listening; `start()` serves it on a thread."""
    return LocalHttpServer(address, _Handler, twin, name="github-twin")


class _Handler(LocalHandler):
    server_version = "GitHub.com"
    methods = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
    server: LocalHttpServer[GitHubTwin]

    def serve(self) -> None:
        raw_path, _, query = self.path.partition("?")
        if raw_path == "/_twin" or raw_path.startswith("/_twin/"):
            self._admin(raw_path, query)
            return
        git = _GIT.match(raw_path)
        if git is not None:
            self._git(git.group(1), git.group(2), git.group(3), query)
            return
        page = _PAGE.match(raw_path)
        if page is not None and self.command == "GET":
            self._page(unquote(page.group(1)), unquote(page.group(2)), int(page.group(3)))
            return
        self._rest(raw_path, query)

    # -- REST ------------------------------------------------------------------------------

    def _rest(self, path: str, query: str) -> None:
        twin = self.server.app
        request_id = _request_id()
        request = self._request(path, query)
        if twin.faults.take("server_errors"):
            status = twin.next_server_error()
            message = "Server Error" if status == 502 else "Service Unavailable"
            self._send_json(status, {"message": message}, request_id)
            return
        if twin.faults.take("secondary_rate_limit"):
            body = shapes.error(
                _SECONDARY_RATE_LIMIT.format(request_id=request_id), status=403, documentation_url=_DOCS_RATE
            )
            self._send_json(403, body, request_id, [("Retry-After", "1")])
            return
        try:
            result = _route(twin, request)
        except TwinError as exc:
            body = shapes.error(
                exc.message, status=exc.status, documentation_url=exc.documentation_url, errors=exc.errors
            )
            self._send_json(exc.status, body, request_id)
            return
        except Exception as exc:  # a twin bug: answer like GitHub's 500, keep the message out
            _LOG.error("github twin: %s %s failed with %s", request.method, path, type(exc).__name__)
            _LOG.debug("github twin failure", exc_info=True)
            self._send_json(500, {"message": "Server Error"}, request_id)
            return
        if result.drop:
            self.close_connection = True
            return
        self._send_json(result.status, result.body, request_id, result.headers, etag=request.method == "GET")

    def _request(self, path: str, query: str) -> _Request:
        return _Request(
            method=self.command,
            path=path,
            query=dict(parse_qsl(query, keep_blank_values=True)),
            headers=self.headers,
            body=self.read_body(_MAX_BODY),
        )

    def _send_json(
        self,
        status: int,
        body: Json,
        request_id: str,
        headers: list[tuple[str, str]] | None = None,
        *,
        etag: bool = False,
        close: bool = False,
    ) -> None:
        payload = b"" if body is None else json.dumps(body, indent=2).encode()
        out = [
            ("X-GitHub-Api-Version-Selected", _API_VERSION),
            ("X-GitHub-Media-Type", "github.v3; format=json"),
            ("X-GitHub-Request-Id", request_id),
            ("X-RateLimit-Limit", "5000"),
            ("X-RateLimit-Remaining", "4999"),
            ("X-RateLimit-Reset", str(int(time.time()) + 3600)),
            ("X-RateLimit-Used", "1"),
            ("X-RateLimit-Resource", "core"),
            *(headers or []),
        ]
        if body is not None:
            out.append(("Content-Type", "application/json; charset=utf-8"))
        if etag and status == 200:
            tag = 'W/"' + hashlib.sha256(payload).hexdigest() + '"'
            out += [
                ("Cache-Control", "private, max-age=60, s-maxage=60"),
                ("Vary", "Accept, Authorization, Cookie, X-GitHub-OTP"),
                ("ETag", tag),
            ]
            if _etag_matches(self.headers.get("If-None-Match"), tag):
                status, payload = 304, b""
                out = [(k, v) for k, v in out if k != "Content-Type"]
        self.send(status, payload, out, close=close)

    def refuse(self, refused: Refused) -> None:
        """A body that cannot be read, answered as GitHub answers a bad request."""
        self._send_json(refused.status, {"message": refused.message}, _request_id(), close=refused.close)

    # -- git -------------------------------------------------------------------------------

    def _git(self, owner: str, name: str, rest: str, query: str) -> None:
        twin = self.server.app
        full_name = f"{owner}/{name}"
        params = dict(parse_qsl(query))
        if rest == "/info/refs":
            service = params.get("service", "")
            allowed = self.command == "GET" and service in ("git-upload-pack", "git-receive-pack")
        else:
            service = rest[1:]
            allowed = self.command == "POST"
        encoding = self.headers.get("Content-Encoding")
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        if not allowed:  # the dumb protocol and odd methods are not served
            self._git_refuse(403, "Forbidden")
            return
        status, message = twin.git_access(
            self.headers.get("Authorization"), full_name, write=service == "git-receive-pack"
        )
        canonical = twin.canonical_name(full_name) if status == 200 else None
        if canonical is None:
            status, message = (status, message) if status != 200 else (401, "Repository not found.")
            # recorded before answering: a client that saw the answer finds it recorded
            twin.record_git_request(GitRequest(full_name, service, self.command, status, encoding, chunked))
            self._git_refuse(status, message)
            return

        sent: list[int] = []

        def send_head(cgi_status: int, headers: list[tuple[str, str]]) -> None:
            sent.append(cgi_status)
            twin.record_git_request(
                GitRequest(canonical, service, self.command, cgi_status, encoding, chunked)
            )
            self.send_response(cgi_status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        request = http_backend.CgiRequest(
            method=self.command,
            path_info=f"/{canonical}.git{rest}",
            query=query,
            headers=self.headers,
            remote_addr=self.client_address[0],
            remote_user="x-access-token",
        )
        try:
            http_backend.run(
                request, self.rfile, send_head, self.wfile, project_root=twin.git_root, home=twin.git_home
            )
        except http_backend.BadRequest:
            self.close_connection = True
            if not sent:
                twin.record_git_request(GitRequest(canonical, service, self.command, 400, encoding, chunked))
                self._git_refuse(400, "Bad Request")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _git_refuse(self, status: int, message: str) -> None:
        headers = [("Content-Type", "text/plain; charset=utf-8")]
        if status == 401:
            headers.append(("WWW-Authenticate", 'Basic realm="GitHub"'))
        self.send(status, (message + "\n").encode(), headers)

    # -- pages and admin -------------------------------------------------------------------

    def _page(self, owner: str, name: str, number: int) -> None:
        """A minimal pull request page, so the `html_url` of every body leads somewhere."""
        try:
            pull = self.server.app.pull(f"{owner}/{name}", number)
        except TwinError:
            self.send(404, b"Not Found\n", [("Content-Type", "text/plain; charset=utf-8")])
            return
        state = "merged" if pull["merged"] else pull["state"]
        text = (
            f"<!doctype html><title>{html.escape(pull['title'])} #{number}</title>"
            f"<h1>{html.escape(pull['title'])} <small>#{number}</small></h1>"
            f"<p>{html.escape(state)}: {html.escape(pull['head']['label'])} into "
            f"{html.escape(pull['base']['ref'])} at {html.escape(pull['head']['sha'])}</p>"
            f"<pre>{html.escape(pull['body'] or '')}</pre>"
        )
        self.send(200, text.encode(), [("Content-Type", "text/html; charset=utf-8")])

    def _admin(self, path: str, query: str) -> None:
        request_id = uuid.uuid4().hex
        request = self._request(path, query)
        if not ipaddress.ip_address(self.client_address[0].removeprefix("::ffff:")).is_loopback:
            self._send_json(403, {"message": "the admin API answers loopback clients only"}, request_id)
            return
        try:
            result = _admin_route(self.server.app, request)
        except TwinError as exc:
            self._send_json(exc.status, {"message": exc.message, "errors": exc.errors}, request_id)
            return
        except (KeyError, ValueError, TypeError) as exc:
            status = 404 if isinstance(exc, KeyError) else 422
            self._send_json(status, {"message": str(exc).strip("'\"")}, request_id)
            return
        self._send_json(result.status, result.body, request_id, result.headers)


def _request_id() -> str:
    return uuid.uuid4().hex[:8].upper() + ":" + uuid.uuid4().hex[:12].upper()


def _etag_matches(header: str | None, tag: str) -> bool:
    if not header:
        return False
    weak = tag.removeprefix("W/")
    return any(
        v.strip() in (tag, weak, "*") or v.strip().removeprefix("W/") == weak for v in header.split(",")
    )


# -- REST routes -------------------------------------------------------------------------------


def _paged(request: _Request, items: list[Json], base_url: str) -> tuple[list[Json], list[tuple[str, str]]]:
    """One page of `items` by `page`/`per_page` (30 by default, at most 100) and its `Link`."""
    per_page = min(max(_int(request.query.get("per_page"), 30), 1), 100)
    page = max(_int(request.query.get("page"), 1), 1)
    last = max((len(items) + per_page - 1) // per_page, 1)
    chunk = items[(page - 1) * per_page : page * per_page]
    links = []

    def link(number: int, rel: str) -> str:
        query = {**request.query, "per_page": str(per_page), "page": str(number)}
        return f'<{base_url}{request.path}?{urlencode(query)}>; rel="{rel}"'

    if page > 1:
        links += [link(page - 1, "prev"), link(1, "first")]
    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    return chunk, [("Link", ", ".join(links))] if links else []


def _int(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


def _full(match: tuple[str, ...]) -> str:
    return f"{unquote(match[0])}/{unquote(match[1])}"


def _create_token(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(201, twin.api_create_token(req.authorization, int(m[0]), req.json()))


def _app(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_app(req.authorization))


def _hook_config(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_hook_config(req.authorization))


def _hook_deliveries(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    """Cursor paging, as GitHub pages deliveries: `Link` names only the next page."""
    items, cursor = twin.api_hook_deliveries(req.authorization, req.query)
    headers = []
    if cursor is not None:
        query = {**req.query, "cursor": cursor}
        headers.append(("Link", f'<{twin.url}{req.path}?{urlencode(query)}>; rel="next"'))
    return _Result(200, items, headers)


def _installation(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_installation(req.authorization, int(m[0])))


def _installations(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    items, headers = _paged(req, twin.api_installations(req.authorization), twin.url)
    return _Result(200, items, headers)


def _repo_installation(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_repo_installation(req.authorization, _full(m)))


def _repo(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_repo(req.authorization, _full(m)))


def _installation_repos(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    selection, repos = twin.api_installation_repos(req.authorization)
    items, headers = _paged(req, repos, twin.url)
    body = {"total_count": len(repos), "repository_selection": selection, "repositories": items}
    return _Result(200, body, headers)


def _revoke(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    twin.api_revoke(req.authorization)
    return _Result(204)


def _create_pull(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    pull = twin.api_create_pull(req.authorization, _full(m), req.json())
    return _Result(
        201, pull, [("Location", pull["url"])], drop=twin.faults.take("drop_response_after_pr_create")
    )


def _list_pulls(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    items, headers = _paged(req, twin.api_list_pulls(req.authorization, _full(m), req.query), twin.url)
    return _Result(200, items, headers)


def _get_pull(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_get_pull(req.authorization, _full(m), int(m[2])))


def _update_pull(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_update_pull(req.authorization, _full(m), int(m[2]), req.json()))


def _merge_pull(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_merge_pull(req.authorization, _full(m), int(m[2]), req.json()))


def _create_comment(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    comment = twin.api_create_comment(req.authorization, _full(m), int(m[2]), req.json())
    drop = twin.faults.take("drop_response_after_comment_create")
    return _Result(201, comment, [("Location", comment["url"])], drop=drop)


def _update_comment(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_update_comment(req.authorization, _full(m), int(m[2]), req.json()))


def _list_comments(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    comments = twin.api_list_comments(req.authorization, _full(m), int(m[2]), req.query)
    items, headers = _paged(req, comments, twin.url)
    return _Result(200, items, headers)


def _list_reviews(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    items, headers = _paged(req, twin.api_list_reviews(req.authorization, _full(m), int(m[2])), twin.url)
    return _Result(200, items, headers)


def _list_comments_of_review(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    comments = twin.api_list_review_comments_of(req.authorization, _full(m), int(m[2]), int(m[3]))
    items, headers = _paged(req, comments, twin.url)
    return _Result(200, items, headers)


def _list_review_comments(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    comments = twin.api_list_review_comments(req.authorization, _full(m), int(m[2]), req.query)
    items, headers = _paged(req, comments, twin.url)
    return _Result(200, items, headers)


def _check_runs(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    runs = twin.api_check_runs(req.authorization, _full(m), unquote(m[2]), req.query)
    items, headers = _paged(req, runs, twin.url)
    return _Result(200, {"total_count": len(runs), "check_runs": items}, headers)


def _combined_status(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    combined = twin.api_combined_status(req.authorization, _full(m), unquote(m[2]))
    items, headers = _paged(req, combined["statuses"], twin.url)
    return _Result(200, {**combined, "statuses": items}, headers)


def _check_merged(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    pull = twin.api_get_pull(req.authorization, _full(m), int(m[2]))
    if not pull["merged"]:
        raise TwinError(404, "Not Found")
    return _Result(204)


def _permission(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.api_permission(req.authorization, _full(m), unquote(m[2])))


_ROUTES: list[tuple[str, re.Pattern[str], Route]] = [
    ("POST", re.compile(rf"^/app/installations/{_NUMBER}/access_tokens$"), _create_token),
    ("GET", re.compile(r"^/app$"), _app),
    ("GET", re.compile(r"^/app/hook/config$"), _hook_config),
    ("GET", re.compile(r"^/app/hook/deliveries$"), _hook_deliveries),
    ("GET", re.compile(rf"^/app/installations/{_NUMBER}$"), _installation),
    ("GET", re.compile(r"^/app/installations$"), _installations),
    ("GET", re.compile(r"^/installation/repositories$"), _installation_repos),
    ("DELETE", re.compile(r"^/installation/token$"), _revoke),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/installation$"), _repo_installation),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}$"), _repo),
    ("POST", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/pulls$"), _create_pull),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/pulls$"), _list_pulls),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}$"), _get_pull),
    ("PATCH", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}$"), _update_pull),
    ("PUT", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/merge$"), _merge_pull),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/merge$"), _check_merged),
    ("POST", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/issues/{_NUMBER}/comments$"), _create_comment),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/issues/{_NUMBER}/comments$"), _list_comments),
    ("PATCH", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/issues/comments/{_ID}$"), _update_comment),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/reviews$"), _list_reviews),
    (
        "GET",
        re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/reviews/{_ID}/comments$"),
        _list_comments_of_review,
    ),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/comments$"), _list_review_comments),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/commits/{_REF}/check-runs$"), _check_runs),
    ("GET", re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/commits/{_REF}/status$"), _combined_status),
    (
        "GET",
        re.compile(rf"^/repos/{_SEGMENT}/{_SEGMENT}/collaborators/{_SEGMENT}/permission$"),
        _permission,
    ),
]


def _route(twin: GitHubTwin, request: _Request) -> _Result:
    method = "GET" if request.method == "HEAD" else request.method
    for route_method, pattern, handler in _ROUTES:
        match = pattern.match(request.path)
        if match is not None and route_method == method:
            return handler(twin, request, match.groups())
    raise TwinError(404, "Not Found")


# -- admin routes ------------------------------------------------------------------------------


def _admin_pull(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    act = {"merge": twin.merge, "close": twin.close, "reopen": twin.reopen}[m[3]]
    return _Result(200, act(_full(m), int(m[2])))


def _admin_review(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    body = req.json()
    comments = []
    for n, raw in enumerate(body.get("comments") or []):
        if (
            not isinstance(raw, dict)
            or not isinstance(raw.get("line"), int)
            or isinstance(raw.get("line"), bool)
        ):
            raise ValueError(f"comments[{n}] must be {{path, line, body}} with a whole line number")
        comments.append((str(raw.get("path") or ""), int(raw["line"]), str(raw.get("body") or "")))
    review = twin.review(
        _full(m),
        int(m[2]),
        state=str(body.get("state", "changes_requested")),
        body=str(body.get("body") or ""),
        comments=comments,
        login=str(body.get("login") or REVIEWER_LOGIN),
    )
    return _Result(201, review)


def _admin_comment(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    body = req.json()
    text = body.get("body")
    if not isinstance(text, str) or not text:
        raise ValueError("body: a comment needs text")
    return _Result(
        201, twin.comment(_full(m), int(m[2]), text, login=str(body.get("login") or REVIEWER_LOGIN))
    )


def _admin_check(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    body = req.json()
    name, conclusion = body.get("name"), body.get("conclusion")
    if not isinstance(name, str) or not name:
        raise ValueError("name: a check needs a name")
    if conclusion not in CHECK_CONCLUSIONS:
        raise ValueError(f"conclusion: one of {', '.join(CHECK_CONCLUSIONS)}")
    ref = body.get("ref")
    run = twin.check(
        _full(m),
        int(m[2]),
        name=name,
        conclusion=conclusion,
        output=str(body.get("output") or ""),
        ref=ref if isinstance(ref, str) and ref else None,
    )
    return _Result(201, run)


def _admin_status(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    body = req.json()
    context, state = body.get("context"), body.get("state")
    if not isinstance(context, str) or not context:
        raise ValueError("context: a status needs a context")
    if state not in STATUS_STATES:
        raise ValueError(f"state: one of {', '.join(STATUS_STATES)}")
    ref, target_url = body.get("ref"), body.get("target_url")
    status = twin.status(
        _full(m),
        int(m[2]),
        context=context,
        state=state,
        description=str(body.get("description") or ""),
        ref=ref if isinstance(ref, str) and ref else None,
        target_url=target_url if isinstance(target_url, str) and target_url else None,
    )
    return _Result(201, status)


def _admin_push(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    body = req.json()
    return _Result(201, twin.person_push(_full(m), int(m[2]), login=str(body.get("login") or REVIEWER_LOGIN)))


def _admin_pulls(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.pulls(_full(m)))


def _admin_comments(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.comments(_full(m), int(m[2])))


def _admin_deliveries(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, [d.summary() for d in twin.deliveries])


def _admin_redeliver(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    twin.redeliver(unquote(m[0]))
    return _Result(202, {"redelivered": unquote(m[0])})


def _admin_flush(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, {"flushed": twin.flush()})


def _admin_withhold(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    on = req.json().get("on")
    if not isinstance(on, bool):
        return _Result(422, {"message": "`on` must be true or false"})
    return _Result(200, {"withholding": twin.withhold(on)})


def _admin_app(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.configure_app(req.json()))


def _admin_faults(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    return _Result(200, twin.admin_faults(req.json() if req.method == "POST" else {}))


def _admin_create_repo(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    body = req.json()
    repo = twin.create_repo(
        str(body.get("full_name", "")),
        _str_map(body.get("files", {})),
        default_branch=str(body.get("default_branch", "main")),
    )
    return _Result(201, repo)


def _admin_create_installation(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    body = req.json()
    number = body.get("installation_id")
    installation_id = twin.create_installation(
        str(body.get("account", "")),
        _names(body.get("repos", [])),
        installation_id=number if isinstance(number, int) else None,
    )
    return _Result(201, {"id": installation_id})


def _admin_installation(twin: GitHubTwin, req: _Request, m: tuple[str, ...]) -> _Result:
    installation_id, act = int(m[0]), m[1]
    if act == "repositories":
        body = req.json()
        twin.add_repos(installation_id, _names(body.get("add", [])))
        twin.remove_repos(installation_id, _names(body.get("remove", [])))
    else:
        twin.suspend(installation_id, act == "suspend")
    return _Result(200, {"id": installation_id})


_ADMIN_ROUTES: list[tuple[str, re.Pattern[str], Route]] = [
    (
        "POST",
        re.compile(rf"^/_twin/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/(merge|close|reopen)$"),
        _admin_pull,
    ),
    ("GET", re.compile(rf"^/_twin/repos/{_SEGMENT}/{_SEGMENT}/pulls$"), _admin_pulls),
    ("POST", re.compile(rf"^/_twin/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/reviews$"), _admin_review),
    ("POST", re.compile(rf"^/_twin/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/comments$"), _admin_comment),
    ("POST", re.compile(rf"^/_twin/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/checks$"), _admin_check),
    ("POST", re.compile(rf"^/_twin/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/statuses$"), _admin_status),
    ("POST", re.compile(rf"^/_twin/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/push$"), _admin_push),
    ("GET", re.compile(rf"^/_twin/repos/{_SEGMENT}/{_SEGMENT}/pulls/{_NUMBER}/comments$"), _admin_comments),
    ("GET", re.compile(r"^/_twin/deliveries$"), _admin_deliveries),
    ("POST", re.compile(rf"^/_twin/deliveries/{_SEGMENT}/redeliver$"), _admin_redeliver),
    ("POST", re.compile(r"^/_twin/flush$"), _admin_flush),
    ("POST", re.compile(r"^/_twin/withhold$"), _admin_withhold),
    ("GET", re.compile(r"^/_twin/faults$"), _admin_faults),
    ("PATCH", re.compile(r"^/_twin/app$"), _admin_app),
    ("POST", re.compile(r"^/_twin/faults$"), _admin_faults),
    ("POST", re.compile(r"^/_twin/repos$"), _admin_create_repo),
    ("POST", re.compile(r"^/_twin/installations$"), _admin_create_installation),
    (
        "POST",
        re.compile(rf"^/_twin/installations/{_NUMBER}/(suspend|unsuspend|repositories)$"),
        _admin_installation,
    ),
]


def _admin_route(twin: GitHubTwin, request: _Request) -> _Result:
    """The reviewer's and the test's controls; see the package docstring for the list."""
    for route_method, pattern, handler in _ADMIN_ROUTES:
        match = pattern.match(request.path)
        if match is not None and route_method == request.method:
            return handler(twin, request, match.groups())
    raise TwinError(404, "Not Found")


def _names(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("repository names must be a list of strings")
    return value


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError("files must map paths to text")
    return value
