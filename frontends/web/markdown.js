// Markdown to DOM nodes, for what agents write. Every piece of their text becomes a text node
// (textContent), never HTML: a <script> or an onerror= in an agent's answer is shown as written.
// Links are kept only for http, https and mailto addresses. Blocks: fenced and indented code,
// headings, quotes, lists, rules, tables, paragraphs; inline: code, bold, italics, strike, links.
//
// Time linear in the text, whatever it holds: no regular expression here can backtrack over more
// than the line it is tried on, each inline delimiter finds its closer through a search that never
// looks at a character twice (`finder`), and quotes and lists nested deeper than MAX_DEPTH are shown
// as their text: nothing recurses without bound.
"use strict";

(function () {
  const SAFE_LINK = /^(https?:|mailto:)/i;
  //: Quotes and lists nested deeper than this are shown as their text (12,000 `>` would overflow the stack).
  const MAX_DEPTH = 16;
  //: Inline spans nest at most 7 deep by construction (each kind once: code, **, __, *, _, ~~, a link).
  const MAX_INLINE_DEPTH = 8;

  function el(tag, cls) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    return node;
  }

  // JavaScript's \s and \w, on a character code (NaN, past either end of the text, is neither).
  function isSpace(c) {
    return c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
      c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;
  }

  function isWord(c) {
    return (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95;
  }

  // The first position at or after `from` where `test` holds, else `end`. It remembers its last
  // answer: asked with `from` never going back, as the inline pass asks, each position is tested
  // once however many openers ask (and nothing is tested before the first ask).
  function finder(end, test) {
    let asked = -1;
    let found = -1;
    return (from) => {
      if (from >= asked && from <= found) return found; // nothing in [asked, found) holds
      let i = from;
      while (i < end && !test(i)) i++;
      asked = from;
      found = i;
      return i;
    };
  }

  // -- inline ------------------------------------------------------------------------------------
  //
  // At each position, left to right, the first of these that matches there wins, and the text it
  // spans is not looked at again at this level (the text inside a span is parsed once more, as its
  // children: a kind of span never holds a whole span of its own kind, so 7 levels at most):
  //   `code`       a run of N backticks, up to the next run of exactly N (else N - 1 of them…)
  //   **strong**   ** before a non-space, up to the first ** after a non-space (__ the same)
  //   *em*         * before a character neither space nor *, up to the next *, after a non-space
  //   _em_         the same with _, not inside a word on either side
  //   ~~strike~~   as **
  //   [text](url)  text without ] or a line break, url without ) or spaces
  //   http(s)://…  up to a space, <, >, ( or ), less the punctuation that ends it
  // Whatever opens and is never closed is text.

  const SPECIAL = /[`*_~[]|https?:\/\//g;

  function inline(text, parent, depth) {
    depth = depth || 0;
    if (depth > MAX_INLINE_DEPTH) { lines(text, parent); return; }
    const n = text.length;
    const at = (i) => text.charCodeAt(i);
    const pairCloser = (c) => finder(n, (q) => at(q) === c && at(q + 1) === c && !isSpace(at(q - 1)));
    const charFinder = (c) => finder(n, (q) => at(q) === c);
    let strongStar, strongUnder, strike, star, under, linkEnd, urlEnd, addressEnd, runs;
    let last = 0;
    let p = 0;

    function flush(to) {
      if (to > last) lines(text.slice(last, to), parent);
    }

    function span(tag, from, to, after) {
      flush(p);
      const node = el(tag);
      inline(text.slice(from, to), node, depth + 1);
      parent.appendChild(node);
      p = last = after;
    }

    // The next run of exactly `k` backticks after position `p` (-1: none). The runs are listed once,
    // by length, each list read by a cursor that only goes forward.
    function codeCloser(k) {
      if (!runs) {
        runs = new Map();
        for (let i = text.indexOf("`"); i >= 0; ) {
          let j = i + 1;
          while (at(j) === 96) j++;
          let list = runs.get(j - i);
          if (!list) runs.set(j - i, (list = { starts: [], next: 0 }));
          list.starts.push(i);
          i = text.indexOf("`", j);
        }
      }
      const list = runs.get(k);
      if (!list) return -1;
      while (list.next < list.starts.length && list.starts[list.next] <= p) list.next++;
      return list.next < list.starts.length ? list.starts[list.next] : -1;
    }

    while (p < n) {
      SPECIAL.lastIndex = p; // on to the next character that may start something
      const hit = SPECIAL.exec(text);
      if (!hit) break;
      p = hit.index;
      const c = at(p);
      if (c === 96) { // `
        let run = 1;
        while (at(p + run) === 96) run++;
        // The whole run opens, else all but its first backtick, and so on ("```a`": `` then a code span).
        let k = run;
        let close = -1;
        while (k > 0 && (close = codeCloser(k)) < 0) k--;
        if (close < 0) { p += run; continue; } // no closer: the run is text
        flush(p + run - k);
        let body = text.slice(p + run, close);
        if (body.length > 1 && body[0] === " " && body[body.length - 1] === " ") body = body.slice(1, -1);
        const code = el("code");
        code.textContent = body;
        parent.appendChild(code);
        p = last = close + k;
        continue;
      }
      if (c === 42) { // *
        if (at(p + 1) === 42 && p + 2 < n && !isSpace(at(p + 2))) {
          const q = (strongStar ||= pairCloser(42))(p + 3);
          if (q < n) { span("strong", p + 2, q, q + 2); continue; }
        } else if (p + 1 < n && at(p + 1) !== 42 && !isSpace(at(p + 1))) {
          const q = (star ||= charFinder(42))(p + 1);
          if (q < n && !isSpace(at(q - 1))) { span("em", p + 1, q, q + 1); continue; }
        }
      } else if (c === 95) { // _
        if (at(p + 1) === 95 && p + 2 < n && !isSpace(at(p + 2))) {
          const q = (strongUnder ||= pairCloser(95))(p + 3);
          if (q < n) { span("strong", p + 2, q, q + 2); continue; }
        } else if (!isWord(at(p - 1)) && p + 1 < n && at(p + 1) !== 95 && !isSpace(at(p + 1))) {
          const q = (under ||= charFinder(95))(p + 1);
          if (q < n && !isSpace(at(q - 1)) && !isWord(at(q + 1))) { span("em", p + 1, q, q + 1); continue; }
        }
      } else if (c === 126) { // ~
        if (at(p + 1) === 126 && p + 2 < n && !isSpace(at(p + 2))) {
          const q = (strike ||= pairCloser(126))(p + 3);
          if (q < n) { span("del", p + 2, q, q + 2); continue; }
        }
      } else if (c === 91) { // [
        const r = (linkEnd ||= finder(n, (q) => at(q) === 93 || at(q) === 10))(p + 1);
        if (r < n && at(r) === 93 && r > p + 1 && at(r + 1) === 40) {
          const u = (urlEnd ||= finder(n, (q) => at(q) === 41 || isSpace(at(q))))(r + 2);
          if (u < n && at(u) === 41 && u > r + 2) {
            const href = text.slice(r + 2, u);
            if (SAFE_LINK.test(href)) {
              flush(p);
              const a = anchor(href);
              inline(text.slice(p + 1, r), a, depth + 1);
              parent.appendChild(a);
              p = last = u + 1;
            } else p = u + 1; // kept as it was written, text
            continue;
          }
        }
      } else { // http:// or https://
        const from = p + hit[0].length;
        let end = (addressEnd ||= finder(n, (q) => { const x = at(q); return isSpace(x) || x === 60 || x === 62 || x === 40 || x === 41; }))(from);
        while (end > from && ".,;:!?'\"".includes(text[end - 1])) end--;
        if (end - from >= 2) {
          flush(p);
          const a = anchor(text.slice(p, end));
          a.textContent = text.slice(p, end);
          parent.appendChild(a);
          p = last = end;
          continue;
        }
      }
      p++;
    }
    flush(n);
  }

  function anchor(href) {
    const a = el("a");
    a.href = href;
    a.rel = "noopener noreferrer nofollow";
    a.target = "_blank";
    return a;
  }

  // Text with its line breaks kept.
  function lines(text, parent) {
    const parts = text.split("\n");
    parts.forEach((part, i) => {
      if (i) parent.appendChild(el("br"));
      if (part) parent.appendChild(document.createTextNode(part));
    });
  }

  // -- blocks ------------------------------------------------------------------------------------
  //
  // Each pattern is anchored at the line's start and ends in a part that cannot give anything back
  // ([^]* to the end, or nothing): trying one costs at most the line's length.

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+([^]*)$/;
  const QUOTE = /^ {0,3}>\s?([^]*)$/;
  const INDENTED = /^( {4}|\t)/;

  // `# Title ##` → [level, "Title"], else null: up to 3 spaces, 1 to 6 #, a space, the title
  // without the #s and spaces that end it.
  function heading(line) {
    let i = 0;
    while (i < 3 && line[i] === " ") i++;
    let h = 0;
    while (h < 7 && line[i + h] === "#") h++;
    if (h < 1 || h > 6 || !isSpace(line.charCodeAt(i + h))) return null;
    let title = line.slice(i + h).trim();
    let end = title.length;
    while (end > 0 && title[end - 1] === "#") end--;
    title = title.slice(0, end).trimEnd();
    return [h, title];
  }

  // A line of three or more -, * or _ (one of them), spaces between: `---`, `* * *`.
  function isRule(line) {
    let i = 0;
    while (i < 3 && line[i] === " ") i++;
    const mark = line[i];
    if (mark !== "-" && mark !== "*" && mark !== "_") return false;
    let count = 0;
    for (; i < line.length; i++) {
      if (line[i] === mark) count++;
      else if (!isSpace(line.charCodeAt(i))) return false;
    }
    return count >= 3;
  }

  function cells(line) {
    let row = line.trim();
    if (row.startsWith("|")) row = row.slice(1);
    if (row.endsWith("|")) row = row.slice(0, -1);
    return row.split("|").map((c) => c.trim());
  }

  // The line under a table's head: `|---|:--:|`.
  function isTableRule(line) {
    return cells(line).every((c) => /^:?-{2,}:?$/.test(c));
  }

  function render(text) {
    const root = document.createDocumentFragment();
    blocks(String(text).split("\n"), root, 0);
    return root;
  }

  function blocks(src, parent, depth) {
    let i = 0;
    while (i < src.length) {
      const line = src[i];
      let m;
      if (!line.trim()) { i++; continue; }
      if ((m = FENCE.exec(line))) {
        const close = new RegExp("^ {0,3}" + m[1][0] + "{" + m[1].length + ",}\\s*$");
        const body = [];
        for (i++; i < src.length && !close.test(src[i]); i++) body.push(src[i]);
        i++;
        const pre = el("pre");
        const code = el("code");
        if (m[2]) code.dataset.lang = m[2];
        code.textContent = body.join("\n");
        pre.appendChild(code);
        parent.appendChild(pre);
        continue;
      }
      if ((m = heading(line))) {
        const h = el("h" + Math.min(6, m[0] + 2));
        inline(m[1], h);
        parent.appendChild(h);
        i++;
        continue;
      }
      if (isRule(line)) { parent.appendChild(el("hr")); i++; continue; }
      if (QUOTE.test(line)) {
        const body = [];
        for (; i < src.length && (m = QUOTE.exec(src[i])); i++) body.push(m[1]);
        const quote = el("blockquote");
        nested(body, quote, depth);
        parent.appendChild(quote);
        continue;
      }
      if (ITEM.test(line)) { i = list(src, i, parent, depth); continue; }
      if (INDENTED.test(line)) {
        const body = [];
        for (; i < src.length && (INDENTED.test(src[i]) || !src[i].trim()); i++) body.push(src[i].replace(INDENTED, ""));
        while (body.length && !body[body.length - 1]) body.pop(); // blank lines at its end
        const pre = el("pre");
        const code = el("code");
        code.textContent = body.join("\n");
        pre.appendChild(code);
        parent.appendChild(pre);
        continue;
      }
      if (line.includes("|") && i + 1 < src.length && isTableRule(src[i + 1])) { i = table(src, i, parent); continue; }
      const body = [];
      for (; i < src.length && src[i].trim() && !FENCE.test(src[i]) && !heading(src[i]) && !QUOTE.test(src[i]) && !(body.length && ITEM.test(src[i])) && !isRule(src[i]); i++) body.push(src[i]);
      const p = el("p");
      inline(body.join("\n"), p);
      parent.appendChild(p);
    }
  }

  // The blocks inside a quote or a list item; past MAX_DEPTH, their lines as text.
  function nested(src, parent, depth) {
    if (depth + 1 < MAX_DEPTH) {
      blocks(src, parent, depth + 1);
      return;
    }
    const p = el("p");
    lines(src.join("\n"), p);
    parent.appendChild(p);
  }

  function list(src, i, parent, depth) {
    const first = ITEM.exec(src[i]);
    const indent = first[1].length;
    const ordered = /\d/.test(first[2]);
    const node = el(ordered ? "ol" : "ul");
    if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
    const strip = new RegExp("^\\s{0," + (indent + 4) + "}");
    while (i < src.length) {
      const m = ITEM.exec(src[i]);
      if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
      const item = el("li");
      const body = [m[3]];
      for (i++; i < src.length; i++) {
        const next = ITEM.exec(src[i]);
        if (next && next[1].length <= indent) break;
        if (!src[i].trim() && !(i + 1 < src.length && /^\s+\S/.test(src[i + 1]))) break;
        body.push(src[i].replace(strip, ""));
      }
      const task = /^\[( |x|X)\]\s+/.exec(body[0]);
      if (task) {
        const box = el("span", "task" + (task[1] === " " ? "" : " done"));
        box.textContent = task[1] === " " ? "☐ " : "☑ ";
        item.appendChild(box);
        body[0] = body[0].slice(task[0].length);
      }
      if (body.length === 1) inline(body[0], item);
      else nested(body, item, depth);
      node.appendChild(item);
      let j = i;
      while (j < src.length && !src[j].trim()) j++;
      if (j > i) {
        const next = j < src.length ? ITEM.exec(src[j]) : null;
        if (!next || next[1].length !== indent || /\d/.test(next[2]) !== ordered) break;
        i = j;
      }
    }
    parent.appendChild(node);
    return i;
  }

  function table(src, i, parent) {
    const wrap = el("div", "table");
    const node = el("table");
    const head = el("tr");
    for (const cell of cells(src[i])) {
      const th = el("th");
      inline(cell, th);
      head.appendChild(th);
    }
    node.appendChild(head);
    for (i += 2; i < src.length && src[i].includes("|") && src[i].trim(); i++) {
      const row = el("tr");
      for (const cell of cells(src[i])) {
        const td = el("td");
        inline(cell, td);
        row.appendChild(td);
      }
      node.appendChild(row);
    }
    wrap.appendChild(node);
    parent.appendChild(wrap);
    return i;
  }

  window.deckMarkdown = { render };
})();
