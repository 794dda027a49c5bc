// Markdown to DOM nodes, for what agents write. Every piece of their text becomes a text node
// (textContent), never HTML: a <script> or an onerror= in an agent's answer is shown as written.
// Links are kept only for http, https and mailto addresses. Blocks: fenced and indented code,
// headings, quotes, lists, rules, tables, paragraphs; inline: code, bold, italics, strike, links.
"use strict";

(function () {
  const SAFE_LINK = /^(https?:|mailto:)/i;

  function el(tag, cls) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    return node;
  }

  // -- inline ------------------------------------------------------------------------------------

  const INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__|\*(?=[^\s*])([^*]*?[^\s*])\*|(?<![\w])_(?=[^\s_])([^_]*?[^\s_])_(?![\w])|~~(?=\S)([\s\S]*?\S)~~|\[([^\]\n]+)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/g;

  function inline(text, parent) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) { // a copy of the pattern: the calls for nested text have their own
      if (m.index > last) lines(text.slice(last, m.index), parent);
      if (m[2] !== undefined) {
        const code = el("code");
        code.textContent = m[2].length > 1 && m[2].startsWith(" ") && m[2].endsWith(" ") ? m[2].slice(1, -1) : m[2];
        parent.appendChild(code);
      } else if (m[3] !== undefined || m[4] !== undefined) {
        const strong = el("strong");
        inline(m[3] ?? m[4], strong);
        parent.appendChild(strong);
      } else if (m[5] !== undefined || m[6] !== undefined) {
        const em = el("em");
        inline(m[5] ?? m[6], em);
        parent.appendChild(em);
      } else if (m[7] !== undefined) {
        const del = el("del");
        inline(m[7], del);
        parent.appendChild(del);
      } else if (m[8] !== undefined) {
        link(m[9], parent, (a) => inline(m[8], a), m[0]);
      } else {
        link(m[10], parent, (a) => { a.textContent = m[10]; }, m[0]);
      }
      last = m.index + m[0].length;
    }
    if (last < text.length) lines(text.slice(last), parent);
  }

  function link(href, parent, fill, raw) {
    if (!SAFE_LINK.test(href)) {
      parent.appendChild(document.createTextNode(raw));
      return;
    }
    const a = el("a");
    a.href = href;
    a.rel = "noopener noreferrer nofollow";
    a.target = "_blank";
    fill(a);
    parent.appendChild(a);
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

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const QUOTE = /^ {0,3}>\s?(.*)$/;
  const TABLE_RULE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

  function render(text) {
    const root = document.createDocumentFragment();
    blocks(String(text).split("\n"), root);
    return root;
  }

  function blocks(src, parent) {
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
      if ((m = HEADING.exec(line))) {
        const h = el("h" + Math.min(6, m[1].length + 2));
        inline(m[2], h);
        parent.appendChild(h);
        i++;
        continue;
      }
      if (RULE.test(line)) { parent.appendChild(el("hr")); i++; continue; }
      if (QUOTE.test(line)) {
        const body = [];
        for (; i < src.length && (m = QUOTE.exec(src[i])); i++) body.push(m[1]);
        const quote = el("blockquote");
        blocks(body, quote);
        parent.appendChild(quote);
        continue;
      }
      if (ITEM.test(line)) { i = list(src, i, parent); continue; }
      if (/^( {4}|\t)/.test(line)) {
        const body = [];
        for (; i < src.length && (/^( {4}|\t)/.test(src[i]) || !src[i].trim()); i++) body.push(src[i].replace(/^( {4}|\t)/, ""));
        const pre = el("pre");
        const code = el("code");
        code.textContent = body.join("\n").replace(/\n+$/, "");
        pre.appendChild(code);
        parent.appendChild(pre);
        continue;
      }
      if (line.includes("|") && i + 1 < src.length && TABLE_RULE.test(src[i + 1])) { i = table(src, i, parent); continue; }
      const body = [];
      for (; i < src.length && src[i].trim() && !FENCE.test(src[i]) && !HEADING.test(src[i]) && !QUOTE.test(src[i]) && !(body.length && ITEM.test(src[i])) && !RULE.test(src[i]); i++) body.push(src[i]);
      const p = el("p");
      inline(body.join("\n"), p);
      parent.appendChild(p);
    }
  }

  function list(src, i, parent) {
    const first = ITEM.exec(src[i]);
    const indent = first[1].length;
    const ordered = /\d/.test(first[2]);
    const node = el(ordered ? "ol" : "ul");
    if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
    while (i < src.length) {
      const m = ITEM.exec(src[i]);
      if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
      const item = el("li");
      const body = [m[3]];
      for (i++; i < src.length; i++) {
        const next = ITEM.exec(src[i]);
        if (next && next[1].length <= indent) break;
        if (!src[i].trim() && !(i + 1 < src.length && /^\s+\S/.test(src[i + 1]))) break;
        body.push(src[i].replace(new RegExp("^\\s{0," + (indent + 4) + "}"), ""));
      }
      const task = /^\[( |x|X)\]\s+/.exec(body[0]);
      if (task) {
        const box = el("span", "task" + (task[1] === " " ? "" : " done"));
        box.textContent = task[1] === " " ? "☐ " : "☑ ";
        item.appendChild(box);
        body[0] = body[0].slice(task[0].length);
      }
      if (body.length === 1) inline(body[0], item);
      else blocks(body, item);
      node.appendChild(item);
      let j = i;
      while (j < src.length && !src[j].trim()) j++;
      if (j > i) {
        const next = j < src.length ? ITEM.exec(src[j]) : null;
        if (!next || next[1].length !== indent || /\d/.test(next[2]) !== ordered) break;
        i = j;
      }
    }
    return finish();

    function finish() {
      parent.appendChild(node);
      return i;
    }
  }

  function cells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
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
