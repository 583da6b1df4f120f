"use strict";
// The game page. Generic on purpose: the server describes the board (/api/info ->
// geometry: kind, rows, cols, action_from/action_to per action, lines, star points) and
// every position (/api/new, /api/move, ...); this file only draws and sends clicks.

const SVGNS = "http://www.w3.org/2000/svg";
const az = { info: null, state: null, selected: null, busy: false, error: "" };
window.az = az; // for tests and the browser console

const $ = (id) => document.getElementById(id);

function el(tag, attrs, parent, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  const res = await fetch(path, opts);
  let data;
  try { data = await res.json(); } catch (e) { data = { error: res.statusText }; }
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}

// ------------------------------------------------------------------ geometry
const PIECES = {
  grid: ["#1f5fa8", "#c0392b"],
  gomoku: ["#111", "#f8f8f8"],
  connect4: ["#d62d20", "#f5c518"],
  baghchal: ["#8cbf6a", "#e67e22"],
};

function layout() {
  const g = az.info.geometry;
  const points = g.kind === "gomoku" || g.kind === "baghchal";
  let step;
  if (g.kind === "gomoku") step = Math.max(30, Math.min(48, Math.floor(600 / g.cols)));
  else if (g.kind === "grid") step = 150;
  else if (g.kind === "connect4") step = 84;
  else step = 125;
  const pad = points ? Math.round(step * 0.9) : 40;
  // Room for two-digit row labels ("15") left of the board's own margin.
  const left = pad + (points && g.row_labels.some((t) => t.length > 1) ? 18 : 0);
  const top = points ? pad : g.kind === "connect4" ? 48 : 16;
  const span = (n) => (points ? step * (n - 1) : step * n);
  return {
    points, step, pad, left,
    width: left + span(g.cols) + (points ? pad : 16),
    height: top + span(g.rows) + (points ? pad : 34),
    top,
  };
}

function center(L, cell) {
  const cols = az.info.geometry.cols;
  const r = Math.floor(cell / cols), c = cell % cols;
  const half = L.points ? 0 : L.step / 2;
  return [L.left + c * L.step + half, L.top + r * L.step + half];
}

// ------------------------------------------------------------------ drawing
function drawBoard(svg, L) {
  const g = az.info.geometry;
  const n = g.rows * g.cols;
  if (g.kind === "gomoku") {
    const e = L.step * 0.6;
    el("rect", { x: L.left - e, y: L.top - e, width: L.step * (g.cols - 1) + 2 * e,
      height: L.step * (g.rows - 1) + 2 * e, fill: "#dcb35c", rx: 6 }, svg);
    for (let i = 0; i < g.rows; i++) {
      const [x1, y] = center(L, i * g.cols), [x2] = center(L, i * g.cols + g.cols - 1);
      el("line", { x1, y1: y, x2, y2: y, stroke: "#3b2a10", "stroke-width": 1.2 }, svg);
    }
    for (let j = 0; j < g.cols; j++) {
      const [x, y1] = center(L, j), [, y2] = center(L, (g.rows - 1) * g.cols + j);
      el("line", { x1: x, y1, x2: x, y2, stroke: "#3b2a10", "stroke-width": 1.2 }, svg);
    }
    for (const p of g.star_points || []) {
      const [x, y] = center(L, p);
      el("circle", { cx: x, cy: y, r: Math.max(3, L.step * 0.1), fill: "#3b2a10" }, svg);
    }
  } else if (g.kind === "baghchal") {
    el("rect", { x: L.left - L.step * 0.45, y: L.top - L.step * 0.45,
      width: L.step * 4.9, height: L.step * 4.9, fill: "#efe3c8", rx: 10 }, svg);
    for (const [a, b] of g.lines) {
      const [x1, y1] = center(L, a), [x2, y2] = center(L, b);
      el("line", { x1, y1, x2, y2, stroke: "#6b5a3a", "stroke-width": 2.5 }, svg);
    }
    for (let p = 0; p < n; p++) {
      const [x, y] = center(L, p);
      el("circle", { cx: x, cy: y, r: 5, fill: "#6b5a3a" }, svg);
    }
  } else if (g.kind === "connect4") {
    el("rect", { x: L.left, y: L.top, width: L.step * g.cols, height: L.step * g.rows,
      fill: "#1d4ea8", rx: 12 }, svg);
    for (let p = 0; p < n; p++) {
      const [x, y] = center(L, p);
      el("circle", { cx: x, cy: y, r: L.step * 0.38, fill: "#f4f1ea" }, svg);
    }
  } else { // grid
    el("rect", { x: L.left, y: L.top, width: L.step * g.cols, height: L.step * g.rows,
      fill: "#fffdf8" }, svg);
    for (let i = 1; i < g.rows; i++) {
      el("line", { x1: L.left, y1: L.top + i * L.step, x2: L.left + g.cols * L.step,
        y2: L.top + i * L.step, stroke: "#333", "stroke-width": 4 }, svg);
    }
    for (let j = 1; j < g.cols; j++) {
      el("line", { x1: L.left + j * L.step, y1: L.top, x2: L.left + j * L.step,
        y2: L.top + g.rows * L.step, stroke: "#333", "stroke-width": 4 }, svg);
    }
  }
  // Coordinates: column labels below, row labels on the left.
  for (let c = 0; c < g.cols; c++) {
    const [x] = center(L, c), [, y] = center(L, (g.rows - 1) * g.cols + c);
    const below = L.points ? L.step * 0.55 + 12 : L.step / 2 + 20;
    el("text", { x, y: y + below, "text-anchor": "middle", class: "label" }, svg,
      g.col_labels[c]);
  }
  for (let r = 0; r < g.rows; r++) {
    if (!g.row_labels[r]) continue;
    const [x, y] = center(L, r * g.cols);
    const left = L.points ? L.step * 0.55 + 8 : L.step / 2 + 10;
    el("text", { x: x - left, y: y + 4, "text-anchor": "end", class: "label" }, svg,
      g.row_labels[r]);
  }
}

function shownAnalysis() {
  return az.state.hint || az.state.analysis;
}

// The search's policy per action: Gumbel's improved policy or PUCT's visit share (the
// server names it in weight_label). Gumbel's visit counts follow a fixed schedule, so they
// are not drawn.
function heatAlpha(w, max) { return (0.1 + 0.6 * Math.sqrt(w / max)).toFixed(3); }

function heatLabel(svg, x, y, w) {
  if (w >= 0.01) {
    el("text", { x, y: y + 4, "text-anchor": "middle", class: "heat-text" }, svg,
      `${Math.round(w * 100)}`);
  }
}

function drawHeat(svg, L) {
  const a = shownAnalysis();
  if (!a || !$("show-heat").checked || az.state.over) return;
  const g = az.info.geometry;
  const weights = a.weights;
  const max = Math.max(...weights);
  if (!(max > 0)) return;
  if (g.kind === "baghchal") return drawBaghchalHeat(svg, L, a, max);
  // One drawn place per action: the column (Connect4) or the point / cell.
  weights.forEach((w, action) => {
    const place = g.kind === "connect4" ? action : g.action_to[action];
    if (!(w >= 0.005 || action === a.action) || place < 0) return;
    const alpha = heatAlpha(w, max);
    // Outlined: the move the search chose.
    const attrs = { fill: `rgba(255, 70, 0, ${alpha})`, class: "heat",
      "data-weight": w.toFixed(4), stroke: action === a.action ? "#8a1c00" : "none",
      "stroke-width": 3 };
    if (g.kind === "connect4") { // a cell above the column with its weight; a light tint
      const x = L.left + place * L.step;
      el("rect", { ...attrs, x: x + 4, y: 6, width: L.step - 8, height: 34, rx: 6,
        "data-col": place }, svg);
      el("text", { x: x + L.step / 2, y: 28, "text-anchor": "middle", class: "heat-text" },
        svg, `${Math.round(w * 100)}%`);
      el("rect", { x: x + 3, y: L.top + 3, width: L.step - 6, height: L.step * g.rows - 6,
        rx: 8, fill: `rgba(255, 120, 0, ${(alpha * 0.3).toFixed(3)})`,
        "pointer-events": "none" }, svg);
      return;
    }
    const [x, y] = center(L, place);
    el("circle", { ...attrs, cx: x, cy: y, r: L.step * (L.points ? 0.4 : 0.3),
      "data-cell": place }, svg);
    heatLabel(svg, x, y, w);
  });
}

// Bagh-Chal: a placement is its point; a move belongs to one piece, so moves are drawn as
// arrows from the piece to where it lands (the strongest few), or, for a search of the
// position on the board (a hint), as the selected piece's targets with their weights and,
// without a selection, as each movable piece's total.
function drawBaghchalHeat(svg, L, a, max) {
  const g = az.info.geometry;
  const current = a === az.state.hint;
  const perPiece = new Map();
  const moves = [];
  a.weights.forEach((w, action) => {
    const chosen = action === a.action;
    if (!(w >= 0.005 || chosen) || g.action_to[action] < 0) return;
    const from = g.action_from[action], to = g.action_to[action];
    if (from < 0) { // a placement
      const [x, y] = center(L, to);
      el("circle", { cx: x, cy: y, r: L.step * 0.3, fill: `rgba(255, 70, 0, ${heatAlpha(w, max)})`,
        class: "heat", "data-weight": w.toFixed(4), "data-cell": to,
        stroke: chosen ? "#8a1c00" : "none", "stroke-width": 3 }, svg);
      heatLabel(svg, x, y, w);
      return;
    }
    perPiece.set(from, (perPiece.get(from) || 0) + w);
    moves.push({ action, from, to, w, chosen });
  });
  if (current && az.selected !== null) {
    for (const m of moves) {
      if (m.from !== az.selected) continue;
      const [x, y] = center(L, m.to);
      el("circle", { cx: x, cy: y, r: L.step * 0.3, fill: `rgba(255, 70, 0, ${heatAlpha(m.w, max)})`,
        class: "heat", "data-weight": m.w.toFixed(4), "data-cell": m.to, "data-from": m.from,
        stroke: m.chosen ? "#8a1c00" : "none", "stroke-width": 3 }, svg);
      el("text", { x, y: y - L.step * 0.14, "text-anchor": "middle", class: "heat-text" }, svg,
        `${Math.round(m.w * 100)}`);
    }
    return;
  }
  moves.sort((p, q) => q.chosen - p.chosen || q.w - p.w); // the chosen move always
  for (const m of moves.slice(0, 6)) {
    if (m.w < 0.02 && !m.chosen) continue;
    const [x0, y0] = center(L, m.from), [x1, y1] = center(L, m.to);
    const k = 1 - (L.step * 0.22) / Math.hypot(x1 - x0, y1 - y0);
    el("line", { x1: x0, y1: y0, x2: x0 + (x1 - x0) * k, y2: y0 + (y1 - y0) * k,
      stroke: `rgba(255, 70, 0, ${heatAlpha(m.w, max)})`, "stroke-width": 10,
      "stroke-linecap": "round", "marker-end": "url(#heat-arrow)", class: "heat",
      "data-weight": m.w.toFixed(4), "data-from": m.from, "data-cell": m.to,
      "pointer-events": "none" }, svg);
    if (m.chosen) { // the move the search chose: a dark core
      el("line", { x1: x0, y1: y0, x2: x0 + (x1 - x0) * k, y2: y0 + (y1 - y0) * k,
        stroke: "#8a1c00", "stroke-width": 3, "pointer-events": "none", class: "chosen" }, svg);
    }
    const [tx, ty] = [x0 + (x1 - x0) * 0.62, y0 + (y1 - y0) * 0.62];
    el("rect", { x: tx - 15, y: ty - 10, width: 30, height: 18, rx: 5, fill: "#fff8",
      "pointer-events": "none" }, svg);
    heatLabel(svg, tx, ty, m.w);
  }
  if (current) { // each movable piece: the total weight of its moves
    for (const [from, w] of perPiece) {
      const [x, y] = center(L, from);
      el("text", { x: x + L.step * 0.3, y: y - L.step * 0.26, class: "heat-badge",
        "data-from": from }, svg, `${Math.round(w * 100)}`);
    }
  }
}

function drawPieces(svg, L) {
  const g = az.info.geometry;
  const colors = PIECES[g.kind];
  az.state.board.forEach((owner, cell) => {
    if (owner < 0) return;
    const [x, y] = center(L, cell);
    if (g.kind === "grid") {
      const d = L.step * 0.28;
      if (owner === 0) {
        el("line", { x1: x - d, y1: y - d, x2: x + d, y2: y + d, stroke: colors[0],
          "stroke-width": 12, "stroke-linecap": "round", class: "piece p0" }, svg);
        el("line", { x1: x - d, y1: y + d, x2: x + d, y2: y - d, stroke: colors[0],
          "stroke-width": 12, "stroke-linecap": "round" }, svg);
      } else {
        el("circle", { cx: x, cy: y, r: d * 1.1, fill: "none", stroke: colors[1],
          "stroke-width": 12, class: "piece p1" }, svg);
      }
    } else if (g.kind === "gomoku") {
      el("circle", { cx: x, cy: y, r: L.step * 0.45, fill: colors[owner],
        stroke: owner ? "#777" : "#000", "stroke-width": 1, class: `piece p${owner}` }, svg);
    } else if (g.kind === "connect4") {
      el("circle", { cx: x, cy: y, r: L.step * 0.38, fill: colors[owner],
        stroke: "rgba(0,0,0,0.25)", "stroke-width": 2, class: `piece p${owner}` }, svg);
    } else { // baghchal: goats (0) and tigers (1)
      el("circle", { cx: x, cy: y, r: L.step * (owner ? 0.3 : 0.24), fill: colors[owner],
        stroke: "#333", "stroke-width": 2, class: `piece p${owner}` }, svg);
      el("text", { x, y: y + 6, "text-anchor": "middle", "font-size": 17, "font-weight": 700,
        fill: "#222", "pointer-events": "none" }, svg, owner ? "T" : "G");
    }
  });
}

function drawMarks(svg, L) {
  const g = az.info.geometry;
  const last = az.state.last;
  if (last && last.to >= 0) {
    const [x, y] = center(L, last.to);
    if (last.from >= 0) {
      const [x0, y0] = center(L, last.from);
      el("line", { x1: x0, y1: y0, x2: x, y2: y, stroke: "#c0392b", "stroke-width": 3,
        "stroke-dasharray": "6 5", "pointer-events": "none" }, svg);
    }
    if (g.kind === "gomoku") {
      el("circle", { cx: x, cy: y, r: Math.max(3, L.step * 0.12), fill: "#e03020",
        class: "last" }, svg);
    } else {
      el("circle", { cx: x, cy: y, r: L.step * (g.kind === "grid" ? 0.45 : 0.42),
        fill: "none", stroke: "#e03020", "stroke-width": 3, class: "last" }, svg);
    }
  }
  if (az.selected !== null) {
    const [x, y] = center(L, az.selected);
    el("circle", { cx: x, cy: y, r: L.step * 0.36, fill: "none", stroke: "#1e7b34",
      "stroke-width": 4 }, svg);
    for (const a of az.state.legal) {
      if (g.action_from[a] !== az.selected) continue;
      const [dx, dy] = center(L, g.action_to[a]);
      el("circle", { cx: dx, cy: dy, r: 8, fill: "#1e7b34", stroke: "#fff",
        "stroke-width": 2, class: "target", "data-cell": g.action_to[a] }, svg);
    }
  }
}

function drawHits(svg, L) {
  const g = az.info.geometry;
  const legal = new Set(az.state.legal);
  if (g.kind === "connect4") {
    for (let c = 0; c < g.cols; c++) {
      el("rect", { x: L.left + c * L.step, y: L.top, width: L.step, height: L.step * g.rows,
        fill: "transparent", class: `hit${legal.has(c) ? " legal" : ""}`, "data-col": c,
        "data-cell": c }, svg).addEventListener("click", () => onColumn(c));
    }
    return;
  }
  const sources = new Set(az.state.legal.map((a) => g.action_from[a]));
  const targets = new Set(az.state.legal.map((a) => g.action_to[a]));
  for (let cell = 0; cell < g.rows * g.cols; cell++) {
    const [x, y] = center(L, cell);
    const clickable = targets.has(cell) || sources.has(cell);
    el("rect", { x: x - L.step / 2, y: y - L.step / 2, width: L.step, height: L.step,
      fill: "transparent", class: `hit${clickable ? " legal" : ""}`, "data-cell": cell }, svg)
      .addEventListener("click", () => onCell(cell));
  }
}

function drawWin(svg, L) {
  const end = az.state.end;
  if (!end || !end.line || !end.line.length) return;
  const pts = end.line.map((cell) => center(L, cell));
  // One straight line when the cells are collinear (a single five / four in a row).
  const [x0, y0] = pts[0], [x1, y1] = pts[pts.length - 1];
  const straight = pts.every(([x, y]) =>
    Math.abs((x1 - x0) * (y - y0) - (y1 - y0) * (x - x0)) < 1e-6 * (1 + L.step * L.step));
  if (straight && pts.length > 1) {
    el("line", { x1: x0, y1: y0, x2: x1, y2: y1, stroke: "rgba(30, 170, 60, 0.75)",
      "stroke-width": Math.max(6, L.step * 0.18), "stroke-linecap": "round",
      class: "win-line", "pointer-events": "none" }, svg);
  }
  for (const [i, [x, y]] of pts.entries()) {
    el("circle", { cx: x, cy: y, r: L.step * (L.points ? 0.47 : 0.4), fill: "none",
      stroke: "#1eaa3c", "stroke-width": 4, class: "win-cell", "data-cell": end.line[i],
      "pointer-events": "none" }, svg);
  }
}

function render() {
  const svg = $("board");
  const L = layout();
  svg.setAttribute("viewBox", `0 0 ${L.width} ${L.height}`);
  svg.replaceChildren();
  if (!az.state) return renderPanel(); // no game yet (the first one failed): the status only
  const defs = el("defs", {}, svg);
  const marker = el("marker", { id: "heat-arrow", viewBox: "0 0 10 10", refX: 5, refY: 5,
    markerWidth: 2.2, markerHeight: 2.2, orient: "auto-start-reverse" }, defs);
  el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#c03000" }, marker);
  drawBoard(svg, L);
  if (az.info.geometry.kind !== "baghchal") drawHeat(svg, L);
  drawPieces(svg, L);
  if (az.info.geometry.kind === "baghchal") drawHeat(svg, L);
  drawMarks(svg, L);
  drawWin(svg, L);
  drawHits(svg, L);
  svg.classList.toggle("your-turn", az.state.your_turn && !az.busy);
  renderPanel();
}

function pct(x) { return `${Math.round(x * 100)}%`; }

function renderPanel() {
  const s = az.state;
  const sides = az.info.sides;
  const status = $("status");
  status.className = "status";
  let text = s ? s.message : "";
  if (az.busy) { text = "The AI is thinking…"; status.classList.add("thinking"); }
  else if (az.error) { text = az.error; status.classList.add("error"); }
  else if (s && s.your_turn && az.info.geometry.kind === "baghchal" && s.legal.length &&
           az.info.geometry.action_from[s.legal[0]] >= 0) {
    text += az.selected === null ? " Click a piece, then where it goes." : " Now click where it goes.";
  }
  status.textContent = text;
  $("undo").disabled = az.busy || !s || !s.can_undo;
  $("hint").disabled = az.busy || !s || !s.your_turn;
  $("new").disabled = az.busy;
  $("side").disabled = az.busy; // a change starts a new game beside the pending request
  if (!s) return;
  const result = $("result");
  result.className = `result ${s.over ? s.result : "hidden"}`;
  result.textContent = s.over ? s.message : "";

  // Value bar: the server's estimate (the Q of the move searched, from your side), or the
  // result once the game is over.
  const a = shownAnalysis();
  const est = s.estimate;
  const fill = $("value-fill");
  $("value-you").textContent = `you (${sides[s.human]})`;
  $("value-ai").textContent = `AI (${sides[1 - s.human]})`;
  fill.style.width = est ? pct(est.you) : "50%";
  $("value-text").textContent = est ? est.text : "no estimate yet";

  const body = $("candidates").querySelector("tbody");
  body.replaceChildren();
  $("search-who").textContent = a
    ? (a === s.hint ? "(hint for you)" : `(the AI's move ${a.move})`) : "";
  $("weight-head").textContent = a ? a.weight_label : "policy";
  if (a) {
    for (const c of a.top) {
      const tr = document.createElement("tr");
      // The candidate's estimate is from the searching side; shown from yours.
      const mine = a.player === s.human;
      const est = c.value === null ? "–" : pct(mine ? (c.value + 1) / 2 : (1 - c.value) / 2);
      for (const t of [c.move, pct(c.weight), est]) {
        const td = document.createElement("td");
        td.textContent = t;
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }
  const moves = $("moves");
  moves.replaceChildren();
  for (let i = 0; i < s.moves.length; i += 2) { // one line per pair of plies
    const li = document.createElement("li");
    li.textContent = `${sides[0]} ${s.moves[i]}` +
      (i + 1 < s.moves.length ? `, ${sides[1]} ${s.moves[i + 1]}` : "");
    moves.appendChild(li);
  }
  moves.scrollTop = moves.scrollHeight;
  $("help").textContent = `Your moves: ${az.info.side_move_help[s.human]}. Click on the ` +
    "board to play.";
  const ex = s.extra || {};
  $("extra").textContent = "goats_in_hand" in ex
    ? `goats in hand: ${ex.goats_in_hand} · captured: ${ex.captured}/5` : "";
}

// ------------------------------------------------------------------ actions
async function request(path, body) {
  az.busy = true;
  az.error = "";
  render();
  try {
    az.state = await api(path, body);
    az.selected = null;
  } catch (e) {
    az.error = e.message;
  } finally {
    az.busy = false;
    render();
  }
}

function sims() { return parseInt($("sims").value, 10); }

function play(action) {
  return request("/api/move", { game_id: az.state.game_id, action, sims: sims() });
}

function onColumn(col) {
  if (!az.state || !az.state.your_turn || az.busy) return;
  if (az.state.legal.includes(col)) play(col);
  else { az.error = `column ${col + 1} is full`; render(); }
}

function onCell(cell) {
  const s = az.state;
  if (!s || !s.your_turn || az.busy) return;
  const g = az.info.geometry;
  az.error = "";
  const place = s.legal.find((a) => g.action_from[a] === -1 && g.action_to[a] === cell);
  if (place !== undefined) return play(place);
  if (az.selected !== null) {
    const move = s.legal.find((a) => g.action_from[a] === az.selected && g.action_to[a] === cell);
    if (move !== undefined) return play(move);
  }
  if (s.legal.some((a) => g.action_from[a] === cell)) {
    az.selected = az.selected === cell ? null : cell;
  } else {
    az.selected = null;
    az.error = "not a legal move here";
  }
  render();
}

function newGame() {
  return request("/api/new", { human: parseInt($("side").value, 10), sims: sims() });
}

async function init() {
  try {
    az.info = await api("/api/info");
  } catch (e) {
    $("status").textContent = `cannot reach the server: ${e.message}`;
    return;
  }
  const info = az.info;
  $("game-name").textContent = info.env.name;
  $("model-info").textContent = `model iteration ${info.model.iteration}`;
  const side = $("side");
  const colors = info.geometry.kind === "connect4" ? ["red, ", "yellow, "] : ["", ""];
  info.sides.forEach((name, i) => {
    const o = document.createElement("option");
    o.value = i;
    o.textContent = `${name} (${colors[i]}moves ${i ? "second" : "first"})`;
    side.appendChild(o);
  });
  const sel = $("sims");
  for (const n of info.sims.choices) {
    const o = document.createElement("option");
    o.value = n;
    o.textContent = `${n} simulations`;
    if (n === info.sims.default) o.selected = true;
    sel.appendChild(o);
  }
  side.addEventListener("change", newGame);
  $("new").addEventListener("click", newGame);
  // Without a game (the first /api/new failed) there is nothing to undo or hint.
  $("undo").addEventListener("click",
    () => az.state && request("/api/undo", { game_id: az.state.game_id }));
  $("hint").addEventListener("click",
    () => az.state && request("/api/hint", { game_id: az.state.game_id, sims: sims() }));
  $("show-heat").addEventListener("change", render);
  await newGame();
}

init();
