"use strict";
// All law text and model output is inserted with textContent: never parsed as HTML.
const $ = (id) => document.getElementById(id);
let current = null;
let views = 0;  // each opening of an article in the pane

function el(tag, text, cls) { const e = document.createElement(tag); if (text != null) e.textContent = text; if (cls) e.className = cls; return e; }

function showSource(citation, support, marker) {
  document.querySelectorAll(".marker.active").forEach((m) => m.classList.remove("active"));
  if (marker) marker.classList.add("active");
  const body = $("source-body"); body.replaceChildren(); body.className = "";
  body.dataset.view = String(++views);  // what a late lookup checks before it adds to the pane
  body.append(el("h3", `${citation.law}, ${citation.article}`));
  if (citation.version_date) body.append(el("div", `Tekst zoals geldend op ${citation.version_date}`, "path"));
  body.append(technical(citation));
  const wanted = new Set(support || []);
  const cited = el("div", null, "cited");
  citation.sentences.forEach((s, i) => {
    const span = el("span", null, "sentence");
    if (wanted.has(i)) { const m = el("mark", s); m.dataset.support = "1"; span.append(m); } else { span.textContent = s; }
    cited.append(span);
  });
  body.append(cited);
  const link = el("a", "Bekijk de officiële tekst"); link.href = citation.url; link.target = "_blank"; link.rel = "noopener";
  body.append(link);
  if (marker) intoView($("source"));
  wholeArticle(citation, body, cited);
  otherVersions(citation, body, support);
}

// On a narrow screen the article stands below the answer: a marker's click brings it into view.
function intoView(box) {
  const top = box.getBoundingClientRect().top;
  if (top < 0 || top > window.innerHeight - 80) box.scrollIntoView({ block: "start", behavior: "smooth" });
}

// A citation names one chunk of its article: the rest of the article is put around it (muted), so the pane
// shows the whole article with the cited part marked, never a piece cut mid-sentence.
async function wholeArticle(citation, body, cited) {
  let data;
  try {
    const r = await api(`/v1/chunks/${encodeURIComponent(citation.id)}`);
    if (!r.ok) return;
    data = await r.json();
  } catch (e) { return; }
  const at = Number.isInteger(data.text_start) ? data.text_start : data.article_text.indexOf(data.text);
  if (at < 0 || data.article_text.slice(at, at + data.text.length) !== data.text) return;
  if (data.article_text === data.text || !cited.isConnected) return;
  const context = (text) => {
    const box = el("div", null, "context");
    text.split("\n").filter((line) => line.trim()).forEach((line) => box.append(el("span", line, "sentence")));
    return box;
  };
  const before = data.article_text.slice(0, at), after = data.article_text.slice(at + data.text.length);
  if (before.trim()) cited.before(context(before));
  if (after.trim()) cited.after(context(after));
}

// The article's other versions in the index: each opens its text and the words that changed.
async function otherVersions(citation, body, support) {
  const view = body.dataset.view;
  let data;
  try {
    const path = `/v1/articles/${encodeURIComponent(citation.law_id)}/${encodeURIComponent(citation.article)}/versions`;
    const r = await api(path);
    if (!r.ok) return;
    data = await r.json();
  } catch (e) { return; }
  const others = data.data.filter((v) => v.version_date !== citation.version_date);
  if (!others.length || body.dataset.view !== view) return;  // another article was opened meanwhile
  const box = el("div", "Andere versies: ", "versions");
  others.forEach((v) => {
    const a = el("a", `tekst van ${v.version_date || "onbekende datum"}`); a.href = "#"; a.className = "version";
    a.addEventListener("click", (ev) => { ev.preventDefault(); showVersion(citation, v, support); });
    box.append(a);
  });
  body.append(box);
}

async function showVersion(citation, version, support) {
  const body = $("source-body"); body.replaceChildren(); body.className = "";
  body.dataset.view = String(++views);
  body.append(el("h3", `${version.law}, ${version.article}`));
  const until = version.valid_until ? ` tot ${version.valid_until}` : "";
  const announced = version.announced ? " (aangekondigd, nog niet in werking)" : "";
  body.append(el("div", `Tekst zoals geldend vanaf ${version.version_date || "onbekende datum"}${until}${announced}`, "path"));
  version.text.split("\n").forEach((line) => body.append(el("span", line, "sentence")));
  const q = new URLSearchParams();
  if (version.version_date) q.set("from", version.version_date);
  if (citation.version_date) q.set("to", citation.version_date);
  const path = `/v1/articles/${encodeURIComponent(citation.law_id)}/${encodeURIComponent(citation.article)}/versions?${q}`;
  try {
    const r = await api(path);
    if (r.ok) {
      const d = await r.json();
      const diff = el("div", null, "diff"); diff.append(el("h3", `Gewijzigd tot de aangehaalde tekst (${citation.version_date})`));
      const p = el("p");
      d.diff.forEach((piece) => p.append(piece.op === "equal" ? document.createTextNode(piece.text) : el(piece.op === "delete" ? "del" : "ins", piece.text)));
      diff.append(d.changed ? p : el("p", "Geen verschil in de tekst.", "muted"));
      body.append(diff);
    }
  } catch (e) { /* the text itself is shown; the difference is extra */ }
  const back = el("a", "Terug naar de aangehaalde tekst"); back.href = "#";
  back.addEventListener("click", (ev) => { ev.preventDefault(); showSource(citation, support || [], null); });
  body.append(back);
  const link = el("a", " · Bekijk de officiële tekst"); link.href = version.url; link.target = "_blank"; link.rel = "noopener";
  body.append(link);
}

// Internal ids help a developer, not a reader: kept in a closed detail.
function technical(c) {
  const d = el("details", null, "ids"); d.append(el("summary", "Technische gegevens"));
  d.append(el("div", `${c.doc_id} · ${c.id}`, "path"));
  return d;
}

function showRelated(r) {
  document.querySelectorAll(".marker.active").forEach((m) => m.classList.remove("active"));
  const body = $("source-body"); body.replaceChildren(); body.className = "";
  body.dataset.view = String(++views);
  body.append(el("h3", `${r.law}, ${r.article}`));
  body.append(el("div", "Mogelijk verwant; niet als antwoord aangehaald.", "path"));
  r.text.split("\n").forEach((line) => body.append(el("span", line, "sentence")));
  const link = el("a", "Bekijk de officiële tekst"); link.href = r.url; link.target = "_blank"; link.rel = "noopener";
  body.append(link);
}

function renderAbstained(resp) {
  // No article of the corpus answers the question: say so plainly, offer the closest articles apart.
  const answer = $("answer"); answer.replaceChildren(); answer.className = "abstained";
  const lead = resp.choices[0].message.content.split("\n\n")[0];
  answer.append(el("p", "Geen antwoord gevonden in de wetten van dit corpus.", "notice"));
  answer.append(el("p", lead));
  const list = $("source-list"); list.replaceChildren();
  $("sources").querySelector("h2").textContent = "Mogelijk verwant";
  resp.related.forEach((r) => {
    const li = el("li"); const a = el("a", `${r.law}, ${r.article}`); a.href = "#";
    a.addEventListener("click", (ev) => { ev.preventDefault(); showRelated(r); });
    li.append(a); list.append(li);
  });
  if (!resp.related.length) list.append(el("li", "Geen verwante artikelen.", "muted"));
}

// The conversation of this tab: the questions asked and the answers given, sent with each next question so a
// follow-up ("en als ik 17 ben?") is read in its context. Kept in the browser only: the server keeps nothing.
let conversation = [];

// The answer shown moves up into the thread (its markers and sources still open their articles) before the next.
function archive() {
  const asked = $("asked").textContent;
  if (!asked) return;
  const turn = el("article", null, "turn");
  turn.append(el("h3", asked));
  const answer = el("div", null, "turn-answer"); answer.append(...$("answer").childNodes);
  const list = el("ol"); list.append(...$("source-list").childNodes);
  turn.append(answer, list);
  $("thread").append(turn);
  $("asked").textContent = "";
}

function newConversation() {
  if (asking) { asking.abort(); asking = null; $("ask").removeAttribute("aria-busy"); }
  conversation = [];
  $("thread").replaceChildren();
  $("asked").textContent = "";
  clearSources();
  $("answer").className = "muted"; $("answer").replaceChildren("Stel een vraag.");
  $("question").value = ""; $("question").focus();
}

function render(resp) {
  current = resp;
  $("sources").querySelector("h2").textContent = "Bronnen";
  if (resp.abstained) { renderAbstained(resp); return; }
  const answer = $("answer"); answer.replaceChildren(); answer.className = "";
  const byIndex = new Map(resp.citations.map((c) => [c.index, c]));
  resp.sentences.forEach((s) => {
    const p = el("p", s.text);
    if (s.lead) p.classList.add("lead");  // the line naming the article that follows: not a claim
    if (s.citation && byIndex.has(s.citation)) {
      const b = el("button", `[${s.citation}]`, "marker"); b.type = "button";
      b.addEventListener("click", () => showSource(byIndex.get(s.citation), s.support, b));
      p.append(b);
    } else {
      // No source sentence supports it clearly enough: say so rather than suggest a source.
      p.classList.add("unsupported");
      p.append(el("span", " (geen steun gevonden in de aangehaalde artikelen)", "muted"));
    }
    answer.append(p);
  });
  if (!resp.sentences.length) answer.append(el("p", resp.choices[0].message.content));
  if (resp.context) answer.append(el("p", `Gelezen als vervolgvraag: ${resp.context.standalone_question}`, "muted read-as"));
  if (resp.date) answer.append(el("p", `Volgens de wet zoals die gold op ${resp.date}.`, "muted asof"));
  if (resp.validity_note) answer.append(el("p", resp.validity_note, "muted"));
  const list = $("source-list"); list.replaceChildren();
  resp.citations.forEach((c) => {
    const li = el("li"); const a = el("a", `${c.law}, ${c.article}`); a.href = "#";
    a.addEventListener("click", (ev) => { ev.preventDefault(); showSource(c, [], null); });
    li.append(a); list.append(li);
    if (c.version_date) li.append(el("span", ` (tekst van ${c.version_date})`, "muted"));
  });
  if (!resp.citations.length) list.append(el("li", "Geen bronnen aangehaald.", "muted"));
}

// The API speaks English to programs; a reader of this page gets the error in Dutch.
function dutch(status, body) {
  const code = body && body.error ? body.error.code : null;
  if (code === "question_too_long" || status === 413) return "de vraag is te lang; maak haar korter";
  if (code === "conversation_too_long") return "het gesprek is te lang om mee te lezen; begin een nieuw gesprek met ‘Nieuwe vraag’";
  if (status === 400 && body && body.error && body.error.param === "date") {
    return "deze datum bij ‘geldend op’ kan niet worden gebruikt (de wetten van dit corpus hebben dan geen tekst); kies een andere datum of laat het veld leeg";
  }
  const byStatus = {
    400: "de vraag kon niet worden verwerkt; controleer de tekst",
    404: "dit model is op de server niet beschikbaar",
    408: "het verzoek kwam te traag binnen; probeer het opnieuw",
    429: "er worden nu te veel vragen tegelijk beantwoord; probeer het zo opnieuw",
    502: "het taalmodel achter de server gaf geen bruikbaar antwoord; probeer het later opnieuw",
    503: "de server is nu niet beschikbaar; probeer het later opnieuw",
    504: "het antwoord duurde te lang; probeer het opnieuw",
  };
  return byStatus[status] || `de server gaf een fout (${status}); probeer het later opnieuw`;
}

// With `wetqa serve --api-key`, the page asks for the key once and keeps it for this tab only.
const KEY = "wetqa-api-key";
async function api(path, options = {}) {
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = { ...(options.headers || {}) };
    const key = sessionStorage.getItem(KEY);
    if (key) headers["Authorization"] = "Bearer " + key;
    const r = await fetch(path, { ...options, headers });
    if (r.status !== 401) return r;
    sessionStorage.removeItem(KEY);
    const given = attempt === 0 ? window.prompt("Deze server vraagt een API-sleutel:") : null;
    if (!given) throw new Error("deze server vraagt een geldige API-sleutel (401); vraag de beheerder om de sleutel");
    sessionStorage.setItem(KEY, given.trim());
  }
  throw new Error("de API-sleutel is niet juist (401)");
}

// A new question (or an error) leaves nothing of the previous answer: no sources, no related articles.
function clearSources() {
  current = null;
  $("sources").querySelector("h2").textContent = "Bronnen";
  $("source-list").replaceChildren();
  const body = $("source-body"); body.className = "muted";
  body.dataset.view = String(++views);
  body.replaceChildren("Klik op een bronverwijzing [n] om het artikel te zien.");
}

// The question after the conversation so far, asked of the law as it stood on the page's date ("geldend op").
function request(model, q) {
  // Only the latest exchanges are read as context (the server's CONTEXT_TURNS, 2): older ones are not sent.
  const body = { model, messages: [...conversation.slice(-4), { role: "user", content: q }] };
  const day = $("date").value;
  if (day) body.date = day;
  return body;
}

// A question asked while another is still answered replaces it: the earlier request is given up, so the
// answer shown is always the answer to the question in the box.
let asking = null;

$("ask").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const q = $("question").value.trim();
  if (!q) {  // a stray Enter in an empty box: the answer being loaded is kept
    if (!asking) { clearSources(); $("answer").className = ""; $("answer").replaceChildren(el("p", "Typ eerst een vraag.", "error")); }
    return;
  }
  // A question asked while another loads replaces it; else the answer shown moves up into the thread.
  if (asking) asking.abort(); else archive();
  const mine = new AbortController(); asking = mine;
  $("asked").textContent = q;
  clearSources();
  $("answer").className = ""; $("answer").replaceChildren(el("span", "Bezig…", "muted"));
  $("ask").setAttribute("aria-busy", "true");
  try {
    const m = await api("/v1/models", { signal: mine.signal });
    const models = await m.json();
    if (!m.ok) throw new Error(dutch(m.status, models));
    const r = await api("/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request(models.data[0].id, q)), signal: mine.signal });
    const data = await r.json();
    if (asking !== mine) return;
    if (!r.ok) throw new Error(dutch(r.status, data));
    render(data);
    conversation.push({ role: "user", content: q }, { role: "assistant", content: data.choices[0].message.content });
    $("question").value = "";
  } catch (e) {
    if (asking !== mine) return;  // given up for a newer question: that one's answer is shown
    // fetch itself fails (TypeError) when the server cannot be reached at all.
    const text = e instanceof TypeError ? "de server is niet bereikbaar; probeer het later opnieuw" : e.message;
    clearSources();
    $("answer").className = "";
    $("answer").replaceChildren(el("p", "Fout: " + text, "error"));
  } finally {
    if (asking === mine) { asking = null; $("ask").removeAttribute("aria-busy"); }
  }
});

$("new").addEventListener("click", newConversation);
