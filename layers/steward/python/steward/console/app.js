// The Steward console: a view over the API that decides nothing the API does not.
// Every text from a document, a model or GitHub is put in the page as text (textContent,
// never innerHTML); links are only ever http(s). The token lives in sessionStorage and is
// sent only as an Authorization header to this origin.
"use strict";

(() => {
  const TOKEN_KEY = "steward.token";
  const USER_KEY = "steward.user";
  const PKCE_KEY = "steward.pkce";
  const RUN_STATUSES = new Set(["queued", "running"]);
  const ENDED_TASK = new Set(["merged", "closed", "failed", "cancelled", "answered"]);
  const RETRYABLE = new Set(["failed", "closed", "cancelled"]);
  const CANCELLABLE = new Set(["queued", "running", "review"]);
  const RETRY_PLANS = new Set(["confirmed", "in_progress", "completed"]); // where the API takes a retry
  const NO_OUTPUT = "(waiting for output)";
  const CONFIRMABLE = new Set(["draft", "awaiting_confirmation"]);
  const ARCHIVABLE = new Set(["draft", "awaiting_confirmation", "confirmed", "in_progress"]);
  const POLL_MS = 2000;

  let config = { sign_in: "none", live_output: "poll" };
  let token = sessionStorage.getItem(TOKEN_KEY);
  let page = { stop() {} }; // what the current page must stop when another opens

  // ---- DOM helpers: text only
  // Characters a page would act on or hide (controls, bidirectional and zero-width format
  // characters) are shown as escapes, as the CLI shows them (`steward.cli_render:visible`):
  // a title with U+202E must not read reversed on the page whose Confirm approves it. Every
  // text the page puts in goes through here (el, notify, the output).
  const HIDDEN = /[\p{Cc}\p{Cf}]/gu;
  function visible(text) {
    return String(text).replace(HIDDEN, (c) => (c === "\n" || c === "\t" ? c
      : `\\u${c.codePointAt(0).toString(16).padStart(4, "0")}`));
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "href") node.setAttribute("href", safeHref(value));
      else node.setAttribute(key, value === true ? "" : visible(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : visible(child)); // a string is a text node
    }
    return node;
  }

  // One way to show a time: the person's time zone, the UTC instant on hover.
  function when(iso) {
    const date = new Date(iso);
    if (!iso || Number.isNaN(date.getTime())) return iso ? String(iso) : null;
    const utc = `${date.toISOString().slice(0, 19).replace("T", " ")} UTC`;
    return el("time", { datetime: date.toISOString(), title: utc },
      date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" }));
  }

  function safeHref(value) {
    const text = String(value);
    if (text.startsWith("#/")) return text;
    try {
      const url = new URL(text, location.href);
      if (url.protocol === "https:" || url.protocol === "http:") return url.href;
    } catch (_) {
      /* not a URL */
    }
    return "#/"; // a javascript:, data: or broken link goes nowhere
  }

  const enc = encodeURIComponent;
  const main = () => document.getElementById("main");

  let generation = 0; // bumped by every navigation: a slower earlier page never paints over it

  // A page lists its parts with null for a part it does not have (no blocked note, no
  // shared waiting line); the DOM would print those as the text "null".
  function show(...nodes) {
    main().replaceChildren(...nodes.filter((node) => node !== null && node !== undefined && node !== false));
  }

  function showFor(mine, ...nodes) {
    if (mine === generation) show(...nodes);
  }

  function notify(message, ok) {
    const box = document.getElementById("notice");
    box.textContent = visible(message || "");
    box.className = ok ? "notice ok" : "notice";
    box.hidden = !message;
  }

  function status(value) {
    return el("span", { class: `status ${value}` }, String(value).replace(/_/g, " "));
  }

  // The API's details name CLI commands; where the console has the button, it says so instead.
  const PAGE_DETAIL = {
    awaiting_confirmation: "the plan is not confirmed yet: Confirm below approves it",
    paused: "the loop is paused: Resume on the Loop page",
  };

  function waitingText(waiting, attrs) {
    if (!waiting) return null;
    const due = waiting.reason === "next_tick" && waiting.until && new Date(waiting.until) <= new Date();
    const until = !waiting.until ? [] : due ? [" due now"] : [" until ", when(waiting.until)];
    const detail = PAGE_DETAIL[waiting.reason] || waiting.detail;
    return el("div", { class: "waiting", ...attrs }, `waiting: ${waiting.reason.replace(/_/g, " ")}`, until,
      detail ? ` — ${detail}` : "");
  }

  // A spend bound as the API computes it (`max_spend`): what confirming may cost at most.
  function spendText(spend) {
    if (!spend) return null;
    const items = `${spend.items} pending item${spend.items === 1 ? "" : "s"}`;
    const rounds = Number(spend.follow_ups || 0);
    let runs = `${spend.attempts} attempt${spend.attempts === 1 ? "" : "s"}`;
    if (rounds) runs = `(${runs} + ${rounds} follow-up round${rounds === 1 ? "" : "s"})`;
    return el("span", { id: "max-spend" }, `at most ${money(spend.usd, 2)} (${items} × ${money(spend.budget_usd, 2)} × ${runs}),`
      + ` plus up to ${money(spend.budget_usd, 2)} per retry you ask for`);
  }

  function money(value, places) {
    const n = Number(value);
    return Number.isFinite(n) ? `$${n.toFixed(places)}` : `$${value}`;
  }

  function facts(pairs) {
    return el("dl", { class: "facts" }, pairs.filter(([, v]) => v !== null && v !== undefined && v !== "")
      .map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  }

  function short(hash) {
    return hash ? String(hash).slice(0, 12) : "—";
  }

  // ---- the API
  class ApiError extends Error {
    constructor(statusCode, code, message) {
      super(message);
      this.status = statusCode;
      this.code = code;
    }
  }

  async function api(method, path, body) {
    const headers = { Authorization: `Bearer ${token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method, headers, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (_) {
      throw new ApiError(0, "unreachable", "cannot reach the Steward API");
    }
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      /* no JSON body */
    }
    if (response.status === 401) {
      signOut();
      throw new ApiError(401, "unauthorized", "your sign-in has expired: sign in again");
    }
    if (!response.ok) {
      const error = (data && data.error) || {};
      throw new ApiError(response.status, error.code || "http_error", error.message || `HTTP ${response.status}`);
    }
    return data;
  }

  // ---- sign-in
  function b64url(bytes) {
    let text = "";
    for (const b of bytes) text += String.fromCharCode(b);
    return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function claims(jwt) {
    try {
      const part = jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      return JSON.parse(atob(part.padEnd(part.length + ((4 - (part.length % 4)) % 4), "=")));
    } catch (_) {
      return {};
    }
  }

  function keep(newToken, user) {
    token = newToken;
    sessionStorage.setItem(TOKEN_KEY, newToken);
    sessionStorage.setItem(USER_KEY, user || claims(newToken).email || claims(newToken).sub || "");
  }

  function signOut() {
    page.stop();
    token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(USER_KEY);
  }

  function redirectUri() {
    return `${location.origin}${location.pathname}`;
  }

  async function beginOidc() {
    const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
    const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
    const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
    sessionStorage.setItem(PKCE_KEY, JSON.stringify({ verifier, state, back: location.hash }));
    const url = new URL(config.authorize_url);
    url.search = new URLSearchParams({
      response_type: "code",
      client_id: config.client_id,
      redirect_uri: redirectUri(),
      scope: config.scopes,
      state,
      code_challenge: b64url(new Uint8Array(digest)),
      code_challenge_method: "S256",
    }).toString();
    location.assign(url.href);
  }

  // A login link (`steward local login USER`) carries a one-time code in the fragment (never
  // sent to a server, never logged); an OIDC redirect carries `code` and `state` in the query.
  async function completeSignIn() {
    const login = /^#login=([A-Za-z0-9_-]{16,128})$/.exec(location.hash);
    if (!login && location.hash.startsWith("#login=")) {
      history.replaceState(null, "", `${location.pathname}#/plans`);
      throw new ApiError(400, "login", "this login link is malformed: run `steward local login USER` again");
    }
    if (login) {
      history.replaceState(null, "", `${location.pathname}#/plans`);
      const response = await fetch("/local/login", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ code: login[1] }),
      });
      const data = await response.json().catch(() => ({}));
      if (!response.ok) throw new ApiError(response.status, "login", (data.error || {}).message || "login refused");
      keep(data.token, data.user);
      return;
    }
    const query = new URLSearchParams(location.search);
    if (!query.has("state") || !(query.has("code") || query.has("error"))) return;
    const saved = JSON.parse(sessionStorage.getItem(PKCE_KEY) || "{}");
    sessionStorage.removeItem(PKCE_KEY);
    history.replaceState(null, "", `${location.pathname}${saved.back || "#/plans"}`);
    if (query.get("state") !== saved.state) throw new ApiError(400, "login", "sign-in answered a request this page did not make");
    if (query.has("error")) throw new ApiError(400, "login", `sign-in refused: ${query.get("error")}`);
    let response;
    try {
      response = await fetch(config.token_url, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          grant_type: "authorization_code", client_id: config.client_id, code: query.get("code"),
          redirect_uri: redirectUri(), code_verifier: saved.verifier,
        }),
      });
    } catch (_) {
      // Unreachable, or outside the page's policy (a token URL that is not https).
      throw new ApiError(0, "login", "cannot reach the sign-in's token endpoint (it must be https)");
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok || !data.id_token) throw new ApiError(response.status, "login", "the token exchange was refused");
    keep(data.id_token, null);
  }

  function signInPage() {
    const body = [el("h1", {}, "Sign in")];
    if (config.sign_in === "oidc") {
      body.push(el("button", { class: "primary", type: "button", onclick: () => beginOidc() }, "Sign in"));
    } else if (config.sign_in === "local") {
      body.push(el("p", {}, "Open a login link made by the local stack:"),
        el("pre", {}, "steward local login USER"));
    } else {
      body.push(el("p", {}, "This deployment has no console sign-in configured."));
    }
    show(...body);
  }

  // ---- pages
  async function plansPage() {
    const mine = generation;
    const { plans } = await api("GET", "/v1/plans?limit=100");
    const rows = plans.map((plan) => {
      const done = Object.values(plan.outcomes || {}).reduce((a, b) => a + b, 0);
      const outcomes = Object.entries(plan.outcomes || {}).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`);
      const total = plan.items.filter((i) => i.ordinal !== null).length;
      return el("tr", {},
        el("td", {}, el("a", { href: `#/plans/${enc(plan.slug)}` }, plan.slug)),
        el("td", {}, status(plan.status)),
        el("td", { class: "hide-narrow" }, plan.repo),
        el("td", {}, `${done}/${total}`, outcomes.length ? el("div", { class: "muted" }, outcomes.join(", ")) : null),
        el("td", {}, `$${plan.cost_usd}`),
        el("td", { class: "hide-narrow" }, when(plan.updated_at)));
    });
    showFor(mine, el("h1", {}, "Plans"), plans.length
      ? el("div", { class: "scroll" }, el("table", {},
        el("thead", {}, el("tr", {}, ["Plan", "Status", "Repository", "Finished", "Cost", "Updated"]
          .map((h, i) => el("th", { class: i === 2 || i === 5 ? "hide-narrow" : null }, h)))),
        el("tbody", {}, rows)))
      : el("p", { class: "muted" }, "No plans yet. Publish one with `steward plan publish FILE`."));
  }

  function detailsOf(item) {
    const details = Array.isArray(item.details) ? item.details.join("\n") : item.details;
    return details ? el("div", { class: "details" }, details) : null;
  }

  // An edited item's earlier revision whose pull request is still open: shown until a person
  // merges or closes it (the item's own task is the new revision's).
  function earlierReviews(item) {
    return (item.earlier_reviews || []).map((r) => el("div", { class: "earlier-review" },
      `revision ${r.revision} is still in review: `, el("a", { href: `#/tasks/${r.task_id}` }, r.task_id),
      r.pr_url ? [", ", el("a", { href: r.pr_url, rel: "noopener noreferrer", target: "_blank" }, "its pull request")] : "",
      " (open until merged or closed)"));
  }

  function list(values) {
    if (!values || !values.length) return null;
    return el("ul", {}, values.map((v) => el("li", {}, el("code", {}, v))));
  }

  // Checks as a task page shows them: [command, its last verdict (true, false, or none yet)].
  function checkMarks(verdicts, ended, attrs) {
    return el("ul", attrs, verdicts.map(([command, passed]) => {
      const mark = passed === undefined || passed === null ? (ended ? "not run" : "not run yet") : passed ? "passed" : "failed";
      return el("li", { class: `check ${mark.replace(/ /g, "-")}` }, el("code", {}, command), ` — ${mark}`);
    }));
  }

  // What asked for a follow-up round: its kind (a link to the ask on GitHub), and who asked
  // or which check failed. The ask's own text is in the task's `follow_up_asked` event.
  const ASKED = { review: "review requesting changes", mention: "mention", check: "failing check", conflict: "conflict with the base" };
  function askedFor(trigger) {
    if (!trigger) return "—";
    const kind = ASKED[trigger.kind] || String(trigger.kind).replace(/_/g, " ");
    const which = trigger.kind === "check"
      ? trigger.check_name ? [" ", el("code", {}, trigger.check_name), trigger.conclusion ? ` (${trigger.conclusion.replace(/_/g, " ")})` : ""] : ""
      : trigger.author ? ` by @${trigger.author}` : "";
    return el("span", { class: "trigger" },
      trigger.url ? el("a", { href: trigger.url, rel: "noopener noreferrer", target: "_blank" }, kind) : kind, which);
  }

  // One row of a task's rounds: the round (its page), what asked, where it is, the commit it
  // pushed once answered, its checks, its cost.
  function roundRow(r) {
    const ended = ENDED_TASK.has(r.status);
    return el("tr", { "data-round": r.round },
      el("td", { class: "round" }, el("a", { href: `#/tasks/${r.id}`, class: "round-link" }, `round ${r.round}`)),
      el("td", {}, askedFor(r.trigger)),
      el("td", {}, status(r.status), r.reason ? el("div", { class: "muted" }, r.reason) : null),
      el("td", { class: "commit" }, r.commit ? el("code", { title: r.commit }, r.commit.slice(0, 7)) : ended ? "none" : "none yet"),
      el("td", {}, r.checks.length ? checkMarks(r.checks.map((c) => [c.command, c.passed]), ended, { class: "round-checks" }) : "—"),
      el("td", { class: "cost" }, `${money(r.cost_usd, 4)} of ${money(r.budget_usd, 2)}`));
  }

  async function planPage(slug) {
    const mine = generation;
    const plan = await api("GET", `/v1/plans/${enc(slug)}`);
    let diff = null;
    try {
      diff = await api("GET", `/v1/plans/${enc(slug)}/diff`);
    } catch (error) {
      if (error.status !== 404) throw error;
    }
    const fm = plan.front_matter || {};
    const field = (key) => (plan[key] !== undefined && plan[key] !== null ? plan[key] : fm[key]);
    const parts = [
      el("h1", {}, plan.title || plan.slug, " ", status(plan.status)),
      facts([
        ["Plan", plan.slug],
        ["Repository", field("repo")],
        ["Base", field("base") || "the repository's default branch"],
        ["Model", field("model")],
        ["Budget per task", field("budget_usd") !== undefined ? `$${field("budget_usd")}` : null],
        ["Max attempts", field("max_attempts")],
        ["Follow-up rounds per item", field("follow_ups")],
        ["Confirming may spend", plan.max_spend && plan.max_spend.items ? spendText(plan.max_spend) : null],
        ["Checks", list(field("checks"))],
        ["Setup", list(field("setup"))],
        ["Content", el("code", {}, short(plan.content_hash))],
        ["Approved", plan.approved_hash ? el("code", {}, short(plan.approved_hash)) : "never"],
        ["Cost so far", plan.cost_usd !== undefined ? `$${plan.cost_usd}` : null],
      ]),
    ];
    // Never confirmed: every key is new, shown above; the list names only the items.
    const frontMatter = plan.approved_hash ? Object.entries((diff && diff.front_matter) || {}) : [];
    const changes = diff ? [
      ...frontMatter.map(([key, [old, now]]) =>
        el("li", { class: "change edited" }, `${key}: ${JSON.stringify(old)} → ${JSON.stringify(now)}`)),
      ...(diff.items || []).map((c) => el("li", { class: `change ${c.change}` }, `${c.change}${(c.fields || []).length ? ` (${c.fields.join(", ")})` : ""}: ${c.ordinal === null ? "" : `#${c.ordinal} `}${c.title}`)),
    ] : [];
    if (changes.length) parts.push(el("h2", {}, "Changed since the last confirmation"), el("ul", { class: "changes" }, changes));
    // One waiting line for the plan when every waiting item waits for the same reason (a plan
    // under review: each item is "not confirmed yet"); a line per item only where they differ.
    const waits = plan.items.filter((i) => i.waiting).map((i) => JSON.stringify(i.waiting));
    const shared = waits.length > 0 && waits.every((w) => w === waits[0]) ? JSON.parse(waits[0]) : null;
    const blocked = plan.blocked ? el("div", { class: "waiting", id: "plan-blocked", role: "note" },
      "Blocked: every item still to do waits on one that ended without a merge. Retry it or edit the plan.") : null;
    parts.push(el("h2", {}, "Items"), blocked, shared ? waitingText(shared, { id: "plan-waiting" }) : null,
      el("div", { class: "scroll" }, el("table", { class: "items" },
      el("thead", {}, el("tr", {}, ["#", "Item", "Status", "Task"].map((h) => el("th", {}, h)))),
      el("tbody", {}, plan.items.map((item) => el("tr", {},
        el("td", {}, item.ordinal === null ? "—" : item.ordinal),
        el("td", {}, el("div", { class: "item-title" }, item.title),
          item.repo && item.repo !== plan.repo ? el("div", { class: "muted item-repo" }, `in ${item.repo}`) : null,
          (item.after || []).length ? el("div", { class: "muted item-after" }, `after ${item.after.map((n) => `#${n}`).join(", ")}`) : null,
          detailsOf(item),
          shared ? null : waitingText(item.waiting), earlierReviews(item)),
        el("td", {}, status(item.status)),
        el("td", {}, item.task_id ? el("a", { href: `#/tasks/${item.task_id}` }, item.task_id) : "—")))))));
    if (CONFIRMABLE.has(plan.status)) {
      // Approve exactly what this page shows: the hash it was rendered from, never a re-read.
      const shownHash = plan.content_hash;
      const button = el("button", { class: "primary", type: "button", id: "confirm" },
        `Confirm this content (${short(shownHash)})`);
      button.addEventListener("click", async () => {
        button.disabled = true;
        try {
          await api("POST", `/v1/plans/${enc(slug)}/confirm`, { content_hash: shownHash });
          await planPage(slug);
          notify("Confirmed: the loop will start its items.", true);
        } catch (error) {
          notify(`Not confirmed: ${error.message}`);
          if (error.status === 409) { // the content moved on: this page's content can never be confirmed
            const again = el("button", { type: "button", id: "review-again" }, "Show the plan as it is now");
            again.addEventListener("click", async () => {
              notify("");
              await planPage(slug);
              main().focus({ preventScroll: true });
            });
            button.replaceWith(again);
            again.focus();
          } else {
            button.disabled = false;
          }
        }
      });
      parts.push(el("div", { class: "actions" }, button));
    }
    if (ARCHIVABLE.has(plan.status)) parts.push(archiveActions(slug));
    showFor(mine, ...parts);
    if (mine === generation && (plan.status === "confirmed" || plan.status === "in_progress")) followPlan(mine, slug, plan);
  }

  // While the loop works a confirmed plan, its page follows the items' statuses and tasks (never
  // a plan awaiting confirmation: what a person reviews does not change under their eyes).
  function followPlan(mine, slug, shown) {
    const progress = (p) => JSON.stringify([p.status, p.cost_usd, p.content_hash,
      (p.items || []).map((i) => [i.key, i.status, i.task_id, i.waiting && i.waiting.reason])]);
    let timer = null;
    const refresh = async () => {
      if (mine !== generation) return;
      try {
        const now = await api("GET", `/v1/plans/${enc(slug)}`);
        // Never while a person is answering the archive question.
        if (mine === generation && progress(now) !== progress(shown) && !document.getElementById("archive-confirm")) {
          await planPage(slug);
          return;
        }
      } catch (_) {
        /* the next try */
      }
      if (mine === generation) timer = setTimeout(refresh, POLL_MS * 2);
    };
    timer = setTimeout(refresh, POLL_MS * 2);
    page = { stop() { clearTimeout(timer); } };
  }

  // Archiving is final and cancels the plan's queued and running tasks: the page asks once
  // more in place (no dialog), and the API decides.
  function archiveActions(slug) {
    const box = el("div", { class: "actions", id: "archive-actions" });
    const ask = () => box.replaceChildren(el("button", { type: "button", class: "danger", id: "archive", onclick: confirmStep }, "Archive…"));
    function confirmStep() {
      const yes = el("button", { type: "button", class: "danger", id: "archive-confirm" }, "Archive this plan");
      yes.addEventListener("click", async () => {
        yes.disabled = true;
        try {
          await api("POST", `/v1/plans/${enc(slug)}/archive`);
          await planPage(slug);
          notify("Archived: the loop starts nothing more for this plan.", true);
        } catch (error) {
          notify(`Not archived: ${error.message}`);
          yes.disabled = false;
        }
      });
      box.replaceChildren(
        el("p", { class: "muted" }, "Archiving is final: the plan's queued and running tasks are cancelled, and nothing more starts."),
        yes,
        el("button", { type: "button", id: "archive-keep", onclick: () => { ask(); box.firstChild.focus(); } }, "Keep it"));
      box.lastChild.focus(); // "Keep it": Enter twice never archives
    }
    ask();
    return box;
  }

  // An event as a sentence; its JSON stays one click away.
  function sentence(event) {
    const d = event.data || {};
    const pull = d.number ? `pull request #${d.number}` : "its pull request";
    switch (event.type) {
      case "started": return "The run started.";
      case "phase": return `Phase ${String(d.phase).replace(/_/g, " ")}${d.turn ? ` (turn ${d.turn})` : ""}.`;
      case "check": return [`Check `, el("code", {}, d.command), d.passed === true ? " passed." : " failed."];
      case "publish": return `Publishing: ${d.stage} ${d.status}.`;
      case "finished":
        return d.status === "review" || d.outcome === "published" ? "The run finished: its pull request is open for review."
          : `The run ended${d.status ? `: ${d.status}` : ""}${d.reason ? ` — ${d.reason}` : ""}.`;
      case "cancelled": return `Cancelled${d.reason ? `: ${d.reason}` : "."}`;
      case "withdrawn": return `Withdrawn${d.by ? ` by ${d.by}` : ""}: the loop closes ${pull}.`;
      case "pr_closed": return `The loop closed ${pull}.`;
      case "github_event":
        return `GitHub: ${pull} ${d.merged ? "merged" : d.action || "changed"}${d.status ? ` (task ${d.status})` : ""}.`;
      default: return `${String(event.type).replace(/_/g, " ")}.`;
    }
  }

  async function taskPage(id) {
    const mine = generation;
    let after = 0;
    let stopped = false;
    let timer = null;
    let streaming = null;
    let screenShown = false;
    let artifactsSeen = false;
    let endedPolls = 0; // polls since the task stopped running: its runtime uploads after it notices
    let ended = false; // finished for good: what has not come will never come ("none", not "none yet")
    const timeline = el("ol", { class: "timeline", id: "timeline" });
    const output = el("pre", { class: "screen", id: "output", "aria-live": "off" });
    const summary = el("div", { id: "summary" });
    const actions = el("div", { class: "actions" });
    const artifacts = el("ul", { id: "artifacts" });
    if (mine !== generation) return;
    page = {
      stop() {
        stopped = true;
        clearTimeout(timer);
        if (streaming) streaming.abort();
      },
    };

    const checkResults = new Map(); // command -> the last `check` event's verdict
    let prSummary = null; // what the run wrote for its pull request (its `finished` event)
    function checkList(plan) {
      const required = plan ? (plan.front_matter || {}).checks || plan.checks || [] : [];
      const commands = required.length ? required : [...checkResults.keys()];
      if (!commands.length) return null;
      return checkMarks(commands.map((command) => [command, checkResults.get(command)]), ended, { id: "checks" });
    }

    // Its follow-up rounds, asked for again only while one is live or a new one started.
    const rounds = el("div", { id: "rounds-section" });
    let roundsFor = null; // the rounds_used the shown rounds were read for
    let roundsShown = [];
    async function loadRounds(task) {
      if (task.parent || !task.rounds_used) return;
      if (roundsFor === task.rounds_used && roundsShown.every((r) => ENDED_TASK.has(r.status))) return;
      const answer = await api("GET", `/v1/tasks/${enc(id)}/rounds`);
      roundsFor = task.rounds_used;
      roundsShown = answer.rounds;
      rounds.replaceChildren(el("h2", {}, "Rounds"), el("div", { class: "scroll" }, el("table", { class: "rounds", id: "rounds" },
        el("thead", {}, el("tr", {}, ["Round", "Asked", "Status", "Commit", "Checks", "Cost"].map((h) => el("th", {}, h)))),
        el("tbody", {}, answer.rounds.map(roundRow)))));
    }

    let retried = false;
    const itemOf = (task, plan) => (plan ? (plan.items || []).find((i) => i.key === task.item_key) : null);
    const newerThan = (task, plan) => {
      const item = itemOf(task, plan);
      return item && item.task_id && item.task_id !== task.id ? item.task_id : null;
    };
    function render(task, plan) {
      const remaining = Math.max(0, Number(task.budget_usd) - Number(task.cost_usd));
      const item = itemOf(task, plan);
      const newer = newerThan(task, plan);
      ended = ENDED_TASK.has(task.status) && !task.waiting;
      summary.replaceChildren(
        el("h1", {}, task.title || task.id, " ", status(task.status)),
        waitingText(task.waiting) || "",
        outcome(task) || "",
        facts([
          ["Task", task.id],
          ["Plan", el("a", { href: `#/plans/${enc(task.plan_slug)}` }, task.plan_slug)],
          ["Item", task.ordinal],
          ["Attempt", task.attempt],
          ["Follow-up round", task.parent ? el("span", { id: "round-of" }, `${task.round} of task `, el("a", { href: `#/tasks/${enc(task.parent)}` }, task.parent)) : null],
          ["Follow-up rounds", !task.parent && task.follow_ups != null ? el("span", { id: "rounds-used" }, `${task.rounds_used} of ${task.follow_ups} used`) : null],
          ["Repository", task.repo],
          ["Branch", task.branch],
          ["Model", task.model],
          ["Newer attempt", newer ? el("a", { href: `#/tasks/${newer}`, id: "newer-attempt" }, newer) : null],
          ["Cost", `${money(task.cost_usd, 4)} of ${money(task.budget_usd, 2)} (remaining ${money(remaining, 4)})`],
          ["Checks", checkList(plan)],
          ["Pull request", task.pr_url ? el("a", { href: task.pr_url, rel: "noopener noreferrer", target: "_blank", id: "pr-link" }, task.pr_url) : ended ? "none" : "none yet"],
          ["Created", when(task.created_at)],
          ["Updated", when(task.updated_at)],
          ["Summary", prSummary ? el("div", { class: "details", id: "pr-summary" }, prSummary) : null],
        ]));
      const buttons = [];
      // Retry only what the API would take: the item's current task, in a plan still active.
      const current = item && item.task_id === task.id && RETRY_PLANS.has(plan.status) && task.kind !== "fixture";
      if (RETRYABLE.has(task.status) && current && !retried) {
        buttons.push(action("Retry", "retry", "Retry requested: the loop starts the next attempt at its next tick."));
      }
      if (CANCELLABLE.has(task.status)) buttons.push(action("Cancel", "cancel", "Cancelled."));
      actions.replaceChildren(...buttons);
    }

    // Why it ended, above everything else: a failed task's reason, its failure code, what to
    // do and who must do it is what a person came to read.
    function outcome(task) {
      if (!task.reason || !ENDED_TASK.has(task.status)) return null;
      const kind = task.classification === "final" ? "final: the loop does not retry it"
        : task.classification === "retryable" ? "retryable: the loop retries it while attempts remain" : task.classification;
      const failure = task.failure;
      return el("div", { class: `outcome ${task.status}`, id: "outcome", role: "note" },
        el("strong", {}, `${task.status[0].toUpperCase()}${task.status.slice(1)}${kind ? ` (${kind})` : ""}: `),
        failure ? el("code", { id: "failure-code" }, failure.code) : null, failure ? " " : null, task.reason,
        failure ? el("div", { class: "remedy", id: "remedy" }, `What to do (${failure.who}): `, failure.remedy) : null);
    }

    function action(label, verb, done) {
      const button = el("button", { type: "button", class: verb === "cancel" ? "danger" : null, id: verb }, label);
      button.addEventListener("click", async () => {
        button.disabled = true;
        try {
          await api("POST", `/v1/tasks/${enc(id)}/${verb}`);
          notify(done, true);
          if (verb === "retry") {
            retried = true; // the page follows the plan until the new attempt exists, and links it
            plan = null;
            poll(false);
          } else {
            await poll(true);
          }
        } catch (error) {
          notify(`${label} refused: ${error.message}`);
          button.disabled = false;
        }
      });
      return button;
    }

    async function loadArtifacts() {
      const { artifacts: listed } = await api("GET", `/v1/tasks/${enc(id)}/artifacts`);
      artifactsSeen = listed.length > 0;
      artifacts.replaceChildren(...(listed.length ? listed.map((a) => el("li", {},
        el("a", {
          href: `#/tasks/${id}`,
          class: "artifact",
          "data-name": a.name,
          onclick: async (event) => {
            event.preventDefault();
            try {
              const { url } = await api("GET", `/v1/tasks/${enc(id)}/artifacts/${enc(a.name)}?redirect=false`);
              location.assign(safeHref(url));
            } catch (error) {
              notify(error.message);
            }
          },
        }, a.name), ` (${a.size} bytes)`)) : [el("li", { class: "muted" }, ended ? "none" : "none yet")]));
    }

    async function showScreen() {
      const { screen } = await api("GET", `/v1/tasks/${enc(id)}/screen`);
      if (screen || !output.textContent || output.textContent === NO_OUTPUT) output.textContent = visible(screen || "(no screen tail stored)");
      screenShown = Boolean(screen);
    }

    async function stream() {
      streaming = new AbortController();
      try {
        const response = await fetch(`/v1/tasks/${enc(id)}/stream`, {
          headers: { Authorization: `Bearer ${token}` }, signal: streaming.signal, cache: "no-store",
        });
        if (!response.ok || !response.body) return;
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        output.textContent = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const frame = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const lines = frame.split("\n");
            const name = (lines.find((l) => l.startsWith("event: ")) || "").slice(7);
            const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
            if (name === "output") {
              output.textContent += visible(data);
              output.scrollTop = output.scrollHeight;
            } else if (name === "end") {
              return;
            }
          }
        }
      } catch (_) {
        /* aborted or dropped: polling goes on */
      } finally {
        streaming = null;
      }
    }

    let plan = null;
    async function poll(once) {
      if (stopped) return;
      try {
        const task = await api("GET", `/v1/tasks/${enc(id)}`);
        render(task, plan); // at once: the plan and the events refine it below
        if (!plan || retried) plan = await api("GET", `/v1/plans/${enc(task.plan_slug)}`).catch(() => null);
        for (;;) {
          const page_ = await api("GET", `/v1/tasks/${enc(id)}/events?after=${after}&limit=100`);
          for (const event of page_.events) {
            const data = event.data || {};
            if (event.type === "check" && typeof data.command === "string") checkResults.set(data.command, data.passed === true);
            if (event.type === "finished" && typeof data.summary === "string" && data.summary) prSummary = data.summary;
            timeline.append(el("li", { class: `event ${event.type}` }, when(event.at), " ", sentence(event),
              el("details", {}, el("summary", {}, "JSON"), el("pre", {}, JSON.stringify(event.data || {}, null, 2)))));
          }
          after = page_.next;
          if (page_.events.length < 100) break;
        }
        render(task, plan);
        await loadRounds(task);
        if (task.status === "running" && config.live_output === "stream" && !streaming) {
          stream();
        } else if (!RUN_STATUSES.has(task.status)) {
          if (streaming) streaming.abort(); // ended (a cancel, say) before its stream said so
          endedPolls += 1;
          if (!screenShown || !artifactsSeen) {
            await showScreen();
            await loadArtifacts();
          }
        }
        const uploaded = (screenShown && artifactsSeen) || endedPolls > 15; // or nothing comes
        const settled = ENDED_TASK.has(task.status) && !task.waiting && (!retried || newerThan(task, plan)) && uploaded;
        if (once || settled) return;
      } catch (error) {
        notify(error.message);
        if (error.status === 404 || error.status === 401) return;
      }
      if (!stopped) timer = setTimeout(() => poll(false), POLL_MS);
    }

    showFor(mine, summary, actions, rounds, el("h2", {}, "Output"), output, el("h2", {}, "Artifacts"), artifacts,
      el("h2", {}, "Events"), timeline);
    output.textContent = NO_OUTPUT;
    await loadArtifacts();
    await poll(false);
  }

  async function loopPage() {
    const mine = generation;
    const settings = await api("GET", "/v1/loop");
    const input = (name, attrs) => el("input", { id: name, name, ...attrs });
    const form = el("form", { class: "settings", id: "loop-form" },
      el("label", { for: "enabled" }, "Enabled"), input("enabled", { type: "checkbox", checked: settings.enabled }),
      el("label", { for: "max_parallel" }, "Max parallel tasks"),
      input("max_parallel", { type: "number", min: 1, max: 100, value: settings.max_parallel }),
      el("label", { for: "max_open_prs" }, "Pull requests awaiting review at most"),
      input("max_open_prs", { type: "number", min: 1, max: 100, value: settings.max_open_prs }),
      el("label", { for: "interval_seconds" }, "Looks every (seconds)"),
      input("interval_seconds", { type: "number", min: 1, max: 86400, value: settings.interval_seconds }),
      el("label", { for: "daily_spawn_cap" }, "Daily spawn cap"),
      input("daily_spawn_cap", { type: "number", min: 0, max: 10000, value: settings.daily_spawn_cap }),
      el("label", { for: "quiet_start" }, "Quiet hours from"),
      input("quiet_start", { type: "time", value: settings.quiet_hours ? settings.quiet_hours.start : "" }),
      el("label", { for: "quiet_end" }, "Quiet hours until"),
      input("quiet_end", { type: "time", value: settings.quiet_hours ? settings.quiet_hours.end : "" }),
      el("label", { for: "timezone" }, "Time zone"), input("timezone", { type: "text", value: settings.timezone }),
      el("span"), el("button", { type: "submit", class: "primary" }, "Save"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const value = (name) => form.elements[name].value;
      const start = value("quiet_start");
      const end = value("quiet_end");
      if (Boolean(start) !== Boolean(end)) {
        notify("Not saved: quiet hours need both a start and an end (or neither, for none)");
        form.elements[start ? "quiet_end" : "quiet_start"].focus();
        return;
      }
      try {
        await api("PUT", "/v1/loop", {
          enabled: form.elements.enabled.checked,
          max_parallel: Number(value("max_parallel")),
          max_open_prs: Number(value("max_open_prs")),
          daily_spawn_cap: Number(value("daily_spawn_cap")),
          interval_seconds: Number(value("interval_seconds")),
          quiet_hours: start && end ? { start, end } : null,
          timezone: value("timezone"),
        });
        await loopPage();
        notify("Loop settings saved.", true);
        main().focus({ preventScroll: true });
      } catch (error) {
        notify(`Not saved: ${error.message}`);
      }
    });
    const pause = el("button", { type: "button", id: "pause" }, settings.paused ? "Resume" : "Pause");
    pause.addEventListener("click", async () => {
      try {
        await api("PUT", "/v1/loop", { paused: !settings.paused });
        await loopPage();
        notify(settings.paused ? "Resumed." : "Paused: nothing new starts until you resume.", true);
        document.getElementById("pause").focus();
      } catch (error) {
        notify(error.message);
      }
    });
    showFor(mine, el("h1", {}, "Loop ", status(settings.paused ? "paused" : settings.enabled ? "running" : "disabled")),
      el("div", { class: "actions" }, pause), form);
  }

  // ---- routing
  async function route(event) {
    if (location.hash.startsWith("#login=")) { // a login link opened in a tab already on the console
      try {
        await completeSignIn();
      } catch (error) {
        notify(error.message);
        event = null; // keep the notice
      }
    }
    generation += 1;
    const mine = generation;
    page.stop();
    page = { stop() {} };
    if (event) notify(""); // a navigation clears the last notice; the first page keeps sign-in's
    const who = document.getElementById("who");
    const out = document.getElementById("sign-out");
    if (!token) {
      who.textContent = "";
      out.hidden = true;
      signInPage();
      return;
    }
    who.textContent = sessionStorage.getItem(USER_KEY) || "";
    out.hidden = false;
    const hash = location.hash || "#/plans";
    let match;
    try {
      // Only the shapes the API gives slugs and task ids (anything else, `..` say, is no page).
      if ((match = /^#\/plans\/([a-z0-9][a-z0-9-]{0,62})$/.exec(hash))) await planPage(match[1]);
      else if ((match = /^#\/tasks\/(t[0-9a-f]{24})$/.exec(hash))) await taskPage(match[1]);
      else if (hash === "#/loop") await loopPage();
      else if (hash === "#/plans" || hash === "#/") await plansPage();
      else throw new ApiError(404, "not_found", "there is no such page");
    } catch (error) {
      if (!token) {
        signInPage();
        notify(error.message);
      } else { // the page says it: no notice repeating it
        showFor(mine, el("h1", {}, error.status === 404 ? "Not found" : "Something went wrong"), el("p", {}, error.message));
      }
    }
    main().focus({ preventScroll: true });
  }

  async function start() {
    document.getElementById("sign-out").addEventListener("click", () => {
      signOut();
      notify("");
      route(null);
    });
    try {
      const response = await fetch("config.json", { cache: "no-store" });
      if (response.ok) config = await response.json();
    } catch (_) {
      /* defaults: no sign-in */
    }
    try {
      await completeSignIn();
    } catch (error) {
      notify(error.message);
    }
    window.addEventListener("hashchange", route);
    await route(null);
  }

  start();
})();
