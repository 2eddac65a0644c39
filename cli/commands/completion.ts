import type { Command, Option } from 'commander';
import { CliError } from '../errors.js';

export const SHELLS = ['bash', 'zsh', 'fish'] as const;
type Shell = (typeof SHELLS)[number];

interface Spec {
  name: string;
  description: string;
  options: { long?: string; short?: string; description: string; takesValue: boolean }[];
}

/** The commands and options of the program, read from its own definition so the script stays true. */
function specOf(program: Command): Spec[] {
  const optionsOf = (cmd: Command) =>
    cmd.options.map((o: Option) => ({
      long: o.long,
      short: o.short,
      description: o.description,
      takesValue: o.required || o.optional,
    }));
  return program.commands.map((cmd) => ({
    name: cmd.name(),
    description: cmd.description().split('\n')[0],
    options: [...optionsOf(cmd), { long: '--help', short: '-h', description: 'display help for command', takesValue: false }],
  }));
}

const words = (list: (string | undefined)[]) => list.filter((w): w is string => !!w).join(' ');
/** Single-quoted for sh, zsh and fish. */
const quote = (text: string) => `'${text.replace(/'/g, `'\\''`)}'`;
const fishQuote = (text: string) => `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

function bash(name: string, spec: Spec[]): string {
  const cases = spec.map((c) => `    ${c.name}) opts=${quote(words(c.options.flatMap((o) => [o.long, o.short])))} ;;`).join('\n');
  return `# bash completion for ${name}: source it, e.g. from ~/.bashrc: source <(${name} completion bash)
_${name}_complete() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" opts=""
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=( $(compgen -W ${quote(words([...spec.map((c) => c.name), '--help', '--version']))} -- "$cur") )
    return
  fi
  case "\${COMP_WORDS[1]}" in
${cases}
  esac
  if [[ "$cur" == -* ]]; then COMPREPLY=( $(compgen -W "$opts" -- "$cur") ); fi
}
complete -o default -F _${name}_complete ${name}
`;
}

function zsh(name: string, spec: Spec[]): string {
  const commands = spec.map((c) => `    ${quote(`${c.name}:${c.description.replace(/:/g, '\\:')}`)}`).join('\n');
  const cases = spec
    .map(
      (c) =>
        `    ${c.name}) opts=(${c.options
          .flatMap((o) => [o.long, o.short])
          .filter(Boolean)
          .map((o) => quote(o as string))
          .join(' ')}) ;;`,
    )
    .join('\n');
  return `#compdef ${name}
# zsh completion for ${name}: source it, e.g. from ~/.zshrc: source <(${name} completion zsh)
_${name}() {
  local -a commands opts
  commands=(
${commands}
  )
  if (( CURRENT == 2 )); then
    _describe 'command' commands
    return
  fi
  case $words[2] in
${cases}
  esac
  if [[ $PREFIX == -* ]]; then compadd -- $opts; else _files; fi
}
compdef _${name} ${name}
`;
}

function fish(name: string, spec: Spec[]): string {
  const lines = [`# fish completion for ${name}: ${name} completion fish > ~/.config/fish/completions/${name}.fish`, `complete -c ${name} -f`];
  for (const c of spec) {
    lines.push(`complete -c ${name} -n __fish_use_subcommand -a ${c.name} -d ${fishQuote(c.description)}`);
    for (const o of c.options) {
      const flags = [o.long ? `-l ${o.long.replace(/^--/, '')}` : '', o.short ? `-s ${o.short.replace(/^-/, '')}` : ''].filter(Boolean).join(' ');
      lines.push(`complete -c ${name} -n '__fish_seen_subcommand_from ${c.name}' ${flags}${o.takesValue ? ' -r' : ''} -d ${fishQuote(o.description)}`);
    }
    // Paths for the commands that take them.
    if (c.name === 'cp') lines.push(`complete -c ${name} -n '__fish_seen_subcommand_from cp' -F`);
  }
  return `${lines.join('\n')}\n`;
}

/** `fleet completion <shell>`: a completion script for the shell, from the program's commands and options. */
export function completionCommand(program: Command, shell: string): number {
  if (!(SHELLS as readonly string[]).includes(shell)) throw new CliError(`No completion for "${shell}": give ${SHELLS.join(', ')}.`);
  const spec = specOf(program);
  const name = program.name();
  const script = { bash, zsh, fish }[shell as Shell](name, spec);
  process.stdout.write(script);
  return 0;
}
